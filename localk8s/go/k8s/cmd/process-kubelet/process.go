package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/creack/pty"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// containerProcess runs `kubectl exec` commands as the container's own process sees
// things: in its mount namespace (its volumes at their mountPaths, the pod's /etc/hosts),
// with its environment and working directory.
type containerProcess struct {
	facts *containerFacts
}

func (p *containerProcess) ExecInContainer(_ context.Context, _, _, _ string, cmd []string, in io.Reader,
	out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	command, err := p.command(cmd)
	if err != nil {
		return err
	}
	if tty {
		err = runTerminal(command, in, out, resize)
	} else {
		err = runPiped(command, in, out, errOut)
	}
	return exitCode(err)
}

// command: the exec'd program, entering the container's mount and UTS namespaces when it has
// its own (the agent starts such containers under `unshare --mount --uts`, the UTS one
// holding the pod's host name; nsenter is util-linux's).
func (p *containerProcess) command(cmd []string) (*exec.Cmd, error) {
	env := make([]string, 0, len(p.facts.Env))
	for k, v := range p.facts.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	if p.ownMountNamespace() {
		args := []string{"--target", strconv.Itoa(p.facts.PID), "--mount", "--uts", "--wdns=" + p.facts.Cwd, "--"}
		c := exec.Command(nsenter, append(args, cmd...)...)
		c.Env = env
		return c, nil
	}
	program, err := lookPath(cmd[0], p.facts.Env["PATH"])
	if err != nil {
		return nil, err
	}
	c := exec.Command(program, cmd[1:]...)
	c.Args[0] = cmd[0]
	c.Env = env
	c.Dir = p.facts.Cwd
	return c, nil
}

var nsenter = func() string {
	if found, err := exec.LookPath("nsenter"); err == nil {
		return found
	}
	return "nsenter"
}()

func (p *containerProcess) ownMountNamespace() bool {
	if p.facts.PID <= 0 {
		return false
	}
	theirs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", p.facts.PID))
	if err != nil {
		return false
	}
	ours, err := os.Readlink("/proc/self/ns/mnt")
	return err == nil && theirs != ours
}

// lookPath finds a program on the container's PATH, as runc does (not this process's).
func lookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(path) {
		candidate := filepath.Join(dir, name)
		if info, err := os.Stat(candidate); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			return candidate, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", name)
}

func runPiped(c *exec.Cmd, in io.Reader, out, errOut io.Writer) error {
	c.Stdout, c.Stderr = out, errOut
	var stdin io.WriteCloser
	if in != nil {
		pipe, err := c.StdinPipe()
		if err != nil {
			return err
		}
		stdin = pipe
	}
	if err := c.Start(); err != nil {
		return err
	}
	if stdin != nil {
		// Not waited for: a client that keeps its stdin open must not keep the exec alive
		// once the command ends (Wait closes the pipe).
		go func() {
			_, _ = io.Copy(stdin, in)
			_ = stdin.Close()
		}()
	}
	return c.Wait()
}

// runTerminal: `kubectl exec -it`: the command on a new pseudo-terminal, resized as the
// client's terminal is.
func runTerminal(c *exec.Cmd, in io.Reader, out io.Writer, resize <-chan remotecommand.TerminalSize) error {
	terminal, err := pty.Start(c)
	if err != nil {
		return err
	}
	defer terminal.Close()
	if resize != nil {
		go func() {
			for size := range resize {
				_ = pty.Setsize(terminal, &pty.Winsize{Rows: size.Height, Cols: size.Width})
			}
		}()
	}
	if in != nil {
		go func() { _, _ = io.Copy(terminal, in) }()
	}
	copied := make(chan struct{})
	go func() {
		if out != nil {
			_, _ = io.Copy(out, terminal) // ends (EIO) once no process holds the terminal
		} else {
			_, _ = io.Copy(io.Discard, terminal)
		}
		close(copied)
	}()
	err = c.Wait()
	<-copied
	return err
}

// exitCode turns a command's end into what the streaming server reports: kubectl exec
// exits with the same code (a signal's end is 128 + the signal, as a shell says).
func exitCode(err error) error {
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		return err
	}
	code := exitErr.ExitCode()
	if status, ok := exitErr.Sys().(syscall.WaitStatus); ok && status.Signaled() {
		code = 128 + int(status.Signal())
	}
	return utilexec.CodeExitError{Err: err, Code: code}
}

// containerOutput serves `kubectl attach`: the container's output from now on (the agent
// passes on what the process writes), and its stdin where the pod spec asks for one (the
// agent keeps that FIFO open for it).
type containerOutput struct {
	agent     *agentClient
	namespace string
	facts     *containerFacts
}

func (a *containerOutput) AttachContainer(ctx context.Context, pod, _, container string, in io.Reader,
	out, errOut io.WriteCloser, tty bool, _ <-chan remotecommand.TerminalSize) error {
	frames, err := a.agent.output(ctx, a.namespace, pod, container)
	if err != nil {
		return err
	}
	defer frames.Close()
	if tty {
		errOut = out // one terminal stream, as with a container that has a TTY
	}
	started := false
	var header [5]byte
	for {
		if _, err := io.ReadFull(frames, header[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil // the container's process ended
			}
			return fmt.Errorf("the container's output: %w", err)
		}
		chunk := make([]byte, binary.BigEndian.Uint32(header[1:]))
		if _, err := io.ReadFull(frames, chunk); err != nil {
			return fmt.Errorf("the container's output: %w", err)
		}
		var target io.Writer
		switch header[0] {
		case 0: // the agent listens: from here on nothing the container writes is missed
			if !started && in != nil {
				go a.feed(in)
			}
			started = true
			continue
		case 1:
			target = out
		default:
			target = errOut
		}
		if target == nil {
			continue
		}
		if _, err := target.Write(chunk); err != nil {
			return nil // the client went away
		}
	}
}

// feed copies the client's stdin into the container's stdin FIFO (opened read-write, so the
// open never waits and the container never reads end of file when a client detaches);
// a container without stdin gets none of it.
func (a *containerOutput) feed(in io.Reader) {
	if a.facts.Stdin == "" {
		_, _ = io.Copy(io.Discard, in)
		return
	}
	fifo, err := os.OpenFile(a.facts.Stdin, os.O_RDWR, 0)
	if err != nil {
		_, _ = io.Copy(io.Discard, in)
		return
	}
	defer fifo.Close()
	_, _ = io.Copy(fifo, in)
}
