// Command process-kubelet is the kubelet endpoint of gpuhub's process node (local-0): the
// HTTPS port the Node advertises in status.daemonEndpoints, where kube-apiserver sends
// pods/exec, pods/attach and pods/portforward, and pods/log.
//
// exec, attach and port-forward are served by Kubernetes' own streaming server
// (k8s.io/cri-streaming: SPDY and WebSocket, as a CRI runtime's streaming server does);
// everything else (containerLogs, healthz) goes to the Python node agent
// (localk8s/agent), which runs the pods as local processes and listens only on a unix
// socket in its folder. That socket also answers what a request needs to know of a pod:
// its IP and each container's main process, environment, working directory and stdin.
// See docs/cluster.md, "The process node".
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// The kubelet's defaults (streamingConnectionIdleTimeout, and the CRI streaming server's
// stream creation timeout).
const (
	idleTimeout           = 4 * time.Hour
	streamCreationTimeout = remotecommand.DefaultStreamCreationTimeout
)

func main() {
	port := flag.Int("port", 10250, "the kubelet port the Node advertises")
	pki := flag.String("pki", "", "the cluster's certificate folder (ca.crt, serving.crt, serving.key)")
	socket := flag.String("agent-socket", "", "the node agent's unix socket")
	flag.Parse()
	if *pki == "" || *socket == "" {
		log.Fatal("process-kubelet needs --pki and --agent-socket")
	}
	tlsConfig, err := serverTLS(*pki)
	if err != nil {
		log.Fatal(err)
	}
	agent := newAgent(*socket)
	server := &http.Server{
		Addr:              fmt.Sprintf("127.0.0.1:%d", *port),
		Handler:           routes(agent),
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.Default(),
		// HTTP/1.1 only (no h2): SPDY and WebSocket streams are HTTP/1.1 upgrades.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	log.Printf("kubelet API of the process node on https://%s (agent: %s)", server.Addr, *socket)
	log.Fatal(server.ListenAndServeTLS("", ""))
}

// serverTLS: the node's serving certificate, and only clients with a certificate signed by
// the cluster CA (the apiserver's kubelet client certificate) may ask.
func serverTLS(pki string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "serving.crt"), filepath.Join(pki, "serving.key"))
	if err != nil {
		return nil, fmt.Errorf("the node's serving certificate in %s: %w", pki, err)
	}
	caPEM, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("the cluster CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in %s", filepath.Join(pki, "ca.crt"))
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	}, nil
}

// routes: the kubelet's streaming paths (with and without the pod's UID, as the kubelet
// serves them), the agent's internal paths refused, and the rest passed to the agent.
func routes(agent *agentClient) http.Handler {
	mux := http.NewServeMux()
	for _, prefix := range []string{"/exec/{namespace}/{pod}", "/exec/{namespace}/{pod}/{uid}"} {
		mux.HandleFunc(prefix+"/{container}", func(w http.ResponseWriter, r *http.Request) {
			serveExec(agent, w, r)
		})
	}
	for _, prefix := range []string{"/attach/{namespace}/{pod}", "/attach/{namespace}/{pod}/{uid}"} {
		mux.HandleFunc(prefix+"/{container}", func(w http.ResponseWriter, r *http.Request) {
			serveAttach(agent, w, r)
		})
	}
	for _, path := range []string{"/portForward/{namespace}/{pod}", "/portForward/{namespace}/{pod}/{uid}"} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) { servePortForward(agent, w, r) })
	}
	mux.HandleFunc("/internal/", http.NotFound) // the agent's own questions stay on its socket
	proxy := &httputil.ReverseProxy{
		Rewrite: func(out *httputil.ProxyRequest) {
			out.SetURL(&url.URL{Scheme: "http", Host: "node-agent"})
		},
		Transport:     agent.transport,
		FlushInterval: -1, // `kubectl logs --follow` sees each line as it comes
	}
	mux.Handle("/", proxy)
	return mux
}

// pod finds the pod a request names on this node, or answers why not (and returns nil).
func pod(agent *agentClient, w http.ResponseWriter, r *http.Request) *podFacts {
	namespace, name, uid := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("uid")
	facts, err := agent.pod(r.Context(), namespace, name)
	var missing notFound
	if errors.As(err, &missing) {
		http.Error(w, string(missing), http.StatusNotFound)
		return nil
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return nil
	}
	if uid != "" && uid != facts.UID {
		http.Error(w, fmt.Sprintf("pod %s/%s on this node has UID %s, not %s", namespace, name, facts.UID, uid), http.StatusNotFound)
		return nil
	}
	return facts
}

// container finds the running container a request names, or answers why not.
func container(agent *agentClient, w http.ResponseWriter, r *http.Request) (*podFacts, *containerFacts) {
	facts := pod(agent, w, r)
	if facts == nil {
		return nil, nil
	}
	name := r.PathValue("container")
	c, ok := facts.Containers[name]
	if !ok {
		names := make([]string, 0, len(facts.Containers))
		for n := range facts.Containers {
			names = append(names, n)
		}
		http.Error(w, fmt.Sprintf("container %q is not in pod %s/%s; its containers are %s",
			name, r.PathValue("namespace"), r.PathValue("pod"), strings.Join(names, ", ")), http.StatusNotFound)
		return nil, nil
	}
	if !c.Running {
		http.Error(w, fmt.Sprintf("container %q of pod %s/%s is not running", name,
			r.PathValue("namespace"), r.PathValue("pod")), http.StatusBadRequest)
		return nil, nil
	}
	return facts, c
}

func serveExec(agent *agentClient, w http.ResponseWriter, r *http.Request) {
	command := r.URL.Query()["command"]
	if len(command) == 0 {
		http.Error(w, "exec needs a command (the command query parameter); none was given", http.StatusBadRequest)
		return
	}
	options, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	facts, c := container(agent, w, r)
	if c == nil {
		return
	}
	remotecommand.ServeExec(w, r, &containerProcess{facts: c}, r.PathValue("pod"), facts.UID,
		r.PathValue("container"), command, options, idleTimeout, streamCreationTimeout,
		remotecommand.SupportedStreamingProtocols)
}

func serveAttach(agent *agentClient, w http.ResponseWriter, r *http.Request) {
	options, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	facts, c := container(agent, w, r)
	if c == nil {
		return
	}
	attacher := &containerOutput{agent: agent, namespace: r.PathValue("namespace"), facts: c}
	remotecommand.ServeAttach(w, r, attacher, r.PathValue("pod"), facts.UID, r.PathValue("container"),
		options, idleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func servePortForward(agent *agentClient, w http.ResponseWriter, r *http.Request) {
	options, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	facts := pod(agent, w, r)
	if facts == nil {
		return
	}
	if facts.IP == "" {
		http.Error(w, fmt.Sprintf("pod %s/%s has no IP yet", r.PathValue("namespace"), r.PathValue("pod")), http.StatusBadRequest)
		return
	}
	portforward.ServePortForward(w, r, podNetwork{ip: facts.IP}, r.PathValue("pod"), facts.UID,
		options, idleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
}

// podNetwork forwards a port-forward stream to the pod's IP: pods on the process node share
// this machine's network, each on a loopback address of its own.
type podNetwork struct{ ip string }

func (p podNetwork) PortForward(_ context.Context, _, _ string, port int32, stream io.ReadWriteCloser) error {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(p.ip, fmt.Sprint(port)), 10*time.Second)
	if err != nil {
		return fmt.Errorf("nothing answers on port %d of the pod (%s): %w", port, p.ip, err)
	}
	defer conn.Close()
	go func() {
		// The client's bytes to the pod; when it stops sending, the pod reads end of file.
		_, _ = io.Copy(conn, stream)
		_ = conn.(*net.TCPConn).CloseWrite()
	}()
	_, err = io.Copy(stream, conn)
	return err
}
