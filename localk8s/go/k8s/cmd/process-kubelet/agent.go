package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
)

// podFacts is what the node agent tells of one pod it runs (GET /internal/pods/<ns>/<name>
// on its socket; localk8s/agent/server.py writes it).
type podFacts struct {
	UID        string                     `json:"uid"`
	IP         string                     `json:"ip"`
	Containers map[string]*containerFacts `json:"containers"`
}

// containerFacts: one container's current run, as its process sees things.
type containerFacts struct {
	Running bool              `json:"running"`
	PID     int               `json:"pid"`
	Env     map[string]string `json:"env"`
	Cwd     string            `json:"cwd"`
	Stdin   string            `json:"stdin"` // the FIFO that is its stdin ("" when the spec asks for none)
}

// agentClient asks the node agent over its unix socket.
type agentClient struct {
	transport *http.Transport
}

func newAgent(socket string) *agentClient {
	return &agentClient{transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var dialer net.Dialer
			return dialer.DialContext(ctx, "unix", socket)
		},
	}}
}

func (a *agentClient) get(ctx context.Context, path string) (*http.Response, error) {
	request, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://node-agent"+path, nil)
	if err != nil {
		return nil, err
	}
	response, err := a.transport.RoundTrip(request)
	if err != nil {
		return nil, fmt.Errorf("the node agent does not answer: %w", err)
	}
	if response.StatusCode == http.StatusNotFound {
		body, _ := io.ReadAll(response.Body)
		response.Body.Close()
		return nil, notFound(body)
	}
	if response.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(response.Body)
		response.Body.Close()
		return nil, fmt.Errorf("the node agent answered %s for %s: %s", response.Status, path, body)
	}
	return response, nil
}

func (a *agentClient) pod(ctx context.Context, namespace, name string) (*podFacts, error) {
	response, err := a.get(ctx, "/internal/pods/"+url.PathEscape(namespace)+"/"+url.PathEscape(name))
	if err != nil {
		return nil, err
	}
	defer response.Body.Close()
	var facts podFacts
	if err := json.NewDecoder(response.Body).Decode(&facts); err != nil {
		return nil, fmt.Errorf("the node agent's facts of pod %s/%s: %w", namespace, name, err)
	}
	return &facts, nil
}

// output streams a container's output from now on (GET /internal/attach/<ns>/<pod>/<c>):
// frames of one byte (1 stdout, 2 stderr; 0 once, when the agent listens), a 4-byte
// big-endian length, and the bytes.
func (a *agentClient) output(ctx context.Context, namespace, pod, container string) (io.ReadCloser, error) {
	response, err := a.get(ctx, "/internal/attach/"+url.PathEscape(namespace)+"/"+url.PathEscape(pod)+"/"+url.PathEscape(container))
	if err != nil {
		return nil, err
	}
	return response.Body, nil
}

// notFound is the agent's answer that it runs no such pod or container.
type notFound string

func (n notFound) Error() string { return string(n) }
