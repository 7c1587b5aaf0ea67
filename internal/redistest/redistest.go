// Package redistest starts throwaway redis-server processes for tests.
//
// Every server is a real redis-server (never a fake) listening on a free
// 127.0.0.1 port, with its working directory in t.TempDir(), no persistence
// (--save "" --appendonly no), DEBUG enabled (--enable-debug-command yes,
// which Redis 7 turns off by default), and a t.Cleanup that stops it. Tests
// talk to it with their own client through [Server.Addr] or [Server.URL],
// and may send administrative commands (INFO, CONFIG, SCRIPT FLUSH, DEBUG
// SLEEP, ...) through [Server.Do], which needs no client library.
//
// Start and StartCluster may fail the test, so call them from the goroutine
// running it, as with t.Fatal.
//
// redis-server 7.0 or newer must be on PATH. When it is missing (or too old)
// a test is skipped with a loud message, except when the environment variable
// CI is true: then the test fails, so that CI never passes by skipping.
// scripts/test.sh installs redis-server before running the tests.
package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Limits on starting and stopping a server.
const (
	startTimeout = 15 * time.Second // from exec to answering PING
	stopTimeout  = 10 * time.Second // from SIGTERM to SIGKILL
	pollInterval = 10 * time.Millisecond
	bindAttempts = 5  // fresh ports tried when another process takes ours
	logTailLines = 30 // lines of the server log quoted in a failure message
)

// installHint is the instruction printed when redis-server is unusable.
const installHint = "install it (apt-get install redis-server) or run scripts/test.sh"

// Option changes how [Start] runs redis-server.
type Option func(*options)

type options struct {
	args []string
}

// WithArgs appends command-line arguments to redis-server's, after the
// package defaults, so that a later setting overrides a default one.
// Example: WithArgs("--maxmemory", "1mb", "--maxmemory-policy", "allkeys-lru").
func WithArgs(args ...string) Option {
	return func(o *options) { o.args = append(o.args, args...) }
}

// Server is one redis-server process started by [Start] or [StartCluster].
// Addr, URL and Do may be called from any goroutine; Stop and Restart are
// serialized with each other, and Restart, which may fail the test, must be
// called from the goroutine running the test.
type Server struct {
	t       testing.TB
	bin     string
	dir     string
	logPath string
	port    int
	busPort int // cluster bus port; 0 outside a cluster
	args    []string
	// configFile, if set, is passed first, as a Sentinel needs.
	configFile string

	mu   sync.Mutex
	proc *process // nil while stopped
}

// process is one run of redis-server.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited
	err  error         // cmd.Wait's result, valid after done is closed
}

// Start starts a redis-server on a free 127.0.0.1 port, with its working
// directory in t.TempDir(), and returns once the server answers PING. It
// stops the server in t.Cleanup. If redis-server cannot be found Start skips
// the test, or fails it when CI is true; if the server does not come up,
// Start fails the test with the tail of the server's log.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return start(t, o.args, false, "")
}

// start starts one server; cluster asks for a cluster bus port as well, and
// configFile, if not empty, is the file to pass first.
func start(t testing.TB, args []string, cluster bool, configFile string) *Server {
	t.Helper()
	dir := t.TempDir()
	s := &Server{
		t:          t,
		bin:        lookRedisServer(t),
		dir:        dir,
		logPath:    filepath.Join(dir, "redis.log"),
		args:       args,
		configFile: configFile,
	}
	t.Cleanup(s.Stop)

	nPorts := 1 // client port
	if cluster {
		nPorts = 2 // and cluster bus port
	}
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(nPorts)
		if err != nil {
			t.Fatalf("redistest: picking a free port: %v", err)
		}
		s.port = ports[0]
		if cluster {
			s.busPort = ports[1]
		}
		p, err := s.launch()
		if err == nil {
			s.mu.Lock()
			s.proc = p
			s.mu.Unlock()
			return s
		}
		if errors.Is(err, errAddrInUse) && attempt < bindAttempts {
			continue // another process took the port between pick and bind
		}
		t.Fatalf("redistest: %v\n%s", err, s.logTail())
	}
}

// Addr returns the server's address, "127.0.0.1:port". It does not change
// across [Server.Restart].
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// URL returns the server's address as "redis://127.0.0.1:port/0", the form
// the --redis flag and Redis client libraries accept.
func (s *Server) URL() string {
	return "redis://" + s.Addr() + "/0"
}

// Do sends one command on a new connection and returns the reply as text:
// simple strings, integers and bulk strings as they are, arrays as their
// elements joined by "\n". An error reply is returned as a [ReplyError], a
// null reply as [ErrNil]. Do works while the server runs; while it is
// stopped Do returns the connection error.
func (s *Server) Do(args ...string) (string, error) {
	return do(s.Addr(), args...)
}

// Stop stops the server now: SIGTERM, then SIGKILL if it has not exited
// within 10 seconds. It returns once the process has exited. Stopping a
// stopped server does nothing. Data is lost, as nothing is persisted.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.stop()
		s.proc = nil
	}
}

// Kill kills the server now with SIGKILL, as a crash would, and returns once
// the process has exited: no shutdown, no final write to clients or
// replicas. Killing a stopped server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		_ = s.proc.cmd.Process.Kill()
		<-s.proc.done
		s.proc = nil
	}
}

// Restart stops the server if it runs and starts it again on the same port
// and in the same directory, returning once it answers PING; clients
// configured with [Server.Addr] reach it again without change. The data set
// starts empty (nothing is persisted), which is what a test simulating a
// Redis outage or restart wants. A cluster node keeps its nodes.conf and so
// its identity and slots. Restart fails the test if the server does not come
// back, for example because another process took the port meanwhile.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.stop()
		s.proc = nil
	}
	var err error
	for attempt := 1; attempt <= bindAttempts; attempt++ {
		var p *process
		p, err = s.launch()
		if err == nil {
			s.proc = p
			return
		}
		if !errors.Is(err, errAddrInUse) {
			break
		}
		time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restart: %v\n%s", err, s.logTail())
}

// errAddrInUse marks a start that failed because a port was taken.
var errAddrInUse = errors.New("address already in use")

// launch runs redis-server once and waits until it answers. The server's
// stdout and stderr go to s.logPath. On failure the process is gone and the
// error wraps errAddrInUse if a port was taken.
func (s *Server) launch() (*process, error) {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own copy of the descriptor
	logStart, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, err
	}

	cmd := exec.Command(s.bin, s.commandLine()...)
	cmd.Dir = s.dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	killWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()

	if err := s.waitReady(p); err != nil {
		p.stop()
		if s.logSince(logStart, "Address already in use") {
			err = fmt.Errorf("%w: %w", errAddrInUse, err)
		}
		return nil, fmt.Errorf("redis-server on %s did not start: %w", s.Addr(), err)
	}
	return p, nil
}

// commandLine returns redis-server's arguments: package defaults, cluster
// settings if any, then the caller's arguments.
func (s *Server) commandLine() []string {
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", "", // log to stdout, which launch sends to redis.log
		"--enable-debug-command", "yes", // DEBUG SLEEP etc.; off by default since 7.0
	}
	if s.configFile != "" {
		args = append([]string{s.configFile}, args...)
	}
	if s.busPort != 0 {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000",
			"--cluster-port", strconv.Itoa(s.busPort),
		)
	}
	return append(args, s.args...)
}

// waitReady polls until the process answers PING on its port, exits, or
// startTimeout passes. The answer must come from this process (INFO's
// process_id), not from another server that took the port.
func (s *Server) waitReady(p *process) error {
	deadline := time.Now().Add(startTimeout)
	pid := p.cmd.Process.Pid
	var last error
	for {
		select {
		case <-p.done:
			return fmt.Errorf("redis-server exited: %v", p.err)
		default:
		}
		if last = s.ping(pid); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer after %v: %w", startTimeout, last)
		}
		select {
		case <-p.done:
		case <-time.After(pollInterval):
		}
	}
}

// ping checks that the server on s.Addr() answers PING and is process pid.
func (s *Server) ping(pid int) error {
	conn, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	r := bufio.NewReader(conn)
	if reply, err := roundTrip(conn, r, "PING"); err != nil || reply != "PONG" {
		return fmt.Errorf("PING answered %q, %v", reply, err)
	}
	info, err := roundTrip(conn, r, "INFO", "server")
	if err != nil {
		return err
	}
	if !strings.Contains(info, "\nprocess_id:"+strconv.Itoa(pid)+"\r\n") {
		return fmt.Errorf("another process answers on %s", s.Addr())
	}
	return nil
}

// stop sends SIGTERM, waits up to stopTimeout, then kills, and returns once
// the process has exited.
func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(stopTimeout):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// logSince reports whether the log written after offset contains substr.
func (s *Server) logSince(offset int64, substr string) bool {
	b, err := os.ReadFile(s.logPath)
	if err != nil || int64(len(b)) < offset {
		return false
	}
	return bytes.Contains(b[offset:], []byte(substr))
}

// logTail returns the last lines of the server log, framed for a failure
// message.
func (s *Server) logTail() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return fmt.Sprintf("(no server log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return fmt.Sprintf("--- last %d lines of %s ---\n%s\n--- end of log ---",
		len(lines), s.logPath, strings.Join(lines, "\n"))
}

// lookRedisServer returns the path of a usable redis-server, or skips the
// test loudly (fails it when CI is true) if there is none.
func lookRedisServer(t testing.TB) string {
	t.Helper()
	bin, err := findRedisServer()
	if err == nil {
		return bin
	}
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("redistest: FAILING (CI=true, so no skip): %v: %s", err, installHint)
	}
	t.Skipf("redistest: SKIPPING (with CI=true this fails): %v: %s", err, installHint)
	return ""
}

// minMajor is the oldest redis-server major version supported: 7 brings
// CLUSTER ADDSLOTSRANGE, --cluster-port and --enable-debug-command.
const minMajor = 7

var (
	findOnce    sync.Once
	foundBin    string
	foundErr    error
	versionExpr = regexp.MustCompile(`v=(\d+)\.(\d+)\.(\d+)`)
)

// findRedisServer locates redis-server on PATH and checks its version, once
// per test binary.
func findRedisServer() (string, error) {
	findOnce.Do(func() {
		foundBin, foundErr = exec.LookPath("redis-server")
		if foundErr != nil {
			foundErr = errors.New("redis-server not found on PATH")
			return
		}
		out, err := exec.Command(foundBin, "--version").Output()
		if err != nil {
			foundErr = fmt.Errorf("%s --version: %v", foundBin, err)
			return
		}
		m := versionExpr.FindStringSubmatch(string(out))
		if m == nil {
			foundErr = fmt.Errorf("%s --version printed no version: %q", foundBin, out)
			return
		}
		if major, _ := strconv.Atoi(m[1]); major < minMajor {
			foundErr = fmt.Errorf("%s is version %s.%s.%s, need %d.0 or newer",
				foundBin, m[1], m[2], m[3], minMajor)
		}
	})
	return foundBin, foundErr
}

// freePorts returns n distinct TCP ports that were free on 127.0.0.1 a
// moment ago. Another process may take one before redis-server binds it;
// callers retry with fresh ports when that happens.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close() // held until all are picked, so the n ports differ
		ap, err := netip.ParseAddrPort(l.Addr().String())
		if err != nil {
			return nil, err
		}
		ports = append(ports, int(ap.Port()))
	}
	return ports, nil
}
