// Package servechild runs `tokenlimit serve` as a child process of a load
// tool, learns its listeners' addresses from its JSON log, and stops it.
package servechild

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Build builds cmd/tokenlimit of the repository at repo into dir and
// returns the binary's path.
func Build(ctx context.Context, repo, dir string) (string, error) {
	bin := filepath.Join(dir, "tokenlimit")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/tokenlimit")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/tokenlimit in %s: %w\n%s", repo, err, out)
	}
	return bin, nil
}

// Listener names a listener by the start of the message the service logs
// for it ("serving HTTP", "serving gRPC", "serving pprof").
type Listener string

// The listeners a child can be asked for.
const (
	HTTP  Listener = "serving HTTP"
	GRPC  Listener = "serving gRPC"
	Pprof Listener = "serving pprof"
)

// Child is a running `tokenlimit serve`.
type Child struct {
	// Addrs holds the address of every listener Start waited for.
	Addrs map[Listener]string
	// Pid is the child's process id (for its CPU time).
	Pid int

	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	stderr  *bytes.Buffer
}

// Start runs bin with args (which must put each wanted listener on a free
// port, such as --listen 127.0.0.1:0) and waits up to 30 s until the child
// has logged the address of every listener in want. The rest of its log is
// drained so that the child never blocks on it. Linux kills the child if
// the tool dies without stopping it.
func Start(ctx context.Context, bin string, args []string, want ...Listener) (*Child, error) {
	cmd := exec.Command(bin, args...)
	killWithParent(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c := &Child{cmd: cmd, done: make(chan struct{}), stderr: &bytes.Buffer{}}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	c.Pid = cmd.Process.Pid
	go func() { c.waitErr = cmd.Wait(); close(c.done) }()
	addrs := make(chan map[Listener]string, 1)
	go readAddrs(stdout, want, addrs)
	select {
	case c.Addrs = <-addrs:
		return c, nil
	case <-c.done:
		return nil, fmt.Errorf("tokenlimit serve exited at start: %v\n%s", c.waitErr, c.stderr.Bytes())
	case <-time.After(30 * time.Second):
		_ = c.Stop()
		return nil, fmt.Errorf("tokenlimit serve did not log its addresses within 30s\n%s", c.stderr.Bytes())
	case <-ctx.Done():
		_ = c.Stop()
		return nil, ctx.Err()
	}
}

// readAddrs sends on addrs, once, the address of every listener in want as
// the log names them, then drains the log.
func readAddrs(log io.Reader, want []Listener, addrs chan<- map[Listener]string) {
	found := map[Listener]string{}
	sc := bufio.NewScanner(log)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if found == nil {
			continue
		}
		var line struct{ Msg, Addr string }
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Addr == "" {
			continue
		}
		for _, l := range want {
			if strings.HasPrefix(line.Msg, string(l)) {
				found[l] = line.Addr
			}
		}
		if len(found) == len(want) {
			addrs <- found
			found = nil
		}
	}
	_, _ = io.Copy(io.Discard, log)
}

// Stop sends SIGTERM and waits for the child to exit, killing it after
// 15 s. It reports a child that did not stop in time or failed.
func (c *Child) Stop() error {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
		return errors.New("tokenlimit serve did not stop within 15s of SIGTERM")
	}
	var exit *exec.ExitError
	if errors.As(c.waitErr, &exit) && !exit.Exited() {
		return nil // killed by our signal before its handler ran
	}
	if c.waitErr != nil {
		return fmt.Errorf("tokenlimit serve: %w\n%s", c.waitErr, c.stderr.Bytes())
	}
	return nil
}
