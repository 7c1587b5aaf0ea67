// Package redisserver starts a throwaway redis-server for the bench tools:
// a child process on a free 127.0.0.1 port (never 6379, never a system
// Redis), no persistence, its working directory in a temporary folder.
package redisserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Server is one running redis-server.
type Server struct {
	cmd  *exec.Cmd
	dir  string
	addr string
	done chan struct{}
}

// Start starts bin on a free loopback port and waits until it answers
// (up to 15 s). extra arguments are appended to the command line.
func Start(bin string, extra ...string) (*Server, error) {
	dir, err := os.MkdirTemp("", "bench-redis-")
	if err != nil {
		return nil, err
	}
	var last error
	for range 5 { // another process may take the port between pick and bind
		port, err := freePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s := &Server{dir: dir, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), done: make(chan struct{})}
		s.cmd = exec.Command(bin,
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--dir", dir,
			"--save", "",
			"--appendonly", "no",
			"--daemonize", "no",
			"--logfile", "redis.log",
		)
		s.cmd.Args = append(s.cmd.Args, extra...)
		s.cmd.Dir = dir
		killWithParent(s.cmd)
		if err := s.cmd.Start(); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("starting %s: %w", bin, err)
		}
		go func() { _ = s.cmd.Wait(); close(s.done) }()
		if last = s.waitReady(); last == nil {
			return s, nil
		}
		s.stopProcess()
	}
	log, _ := os.ReadFile(dir + "/redis.log")
	os.RemoveAll(dir)
	return nil, fmt.Errorf("redis-server did not start: %w\n%s", last, log)
}

func freePort() (int, error) {
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port != 6379 {
			return port, nil
		}
	}
}

// waitReady polls PING until the server answers, and checks that the
// answer comes from our process.
func (s *Server) waitReady() error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-s.done:
			return errors.New("redis-server exited")
		default:
		}
		info, err := s.Do("INFO", "server")
		if err == nil {
			if !strings.Contains(info, "process_id:"+strconv.Itoa(s.cmd.Process.Pid)+"\r\n") {
				return errors.New("another process answers on " + s.addr)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.addr }

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Do sends one command on a fresh connection and returns a bulk or simple
// string reply; enough for INFO and CONFIG.
func (s *Server) Do(args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", s.addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	switch line[0] {
	case '+':
		return strings.TrimRight(line[1:], "\r\n"), nil
	case '$':
		n, err := strconv.Atoi(strings.TrimRight(line[1:], "\r\n"))
		if err != nil || n < 0 {
			return "", fmt.Errorf("bad reply %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("reply %q", strings.TrimSpace(line))
}

// Stop stops the server (SIGTERM, then SIGKILL after 10 s) and removes its
// directory.
func (s *Server) Stop() {
	s.stopProcess()
	os.RemoveAll(s.dir)
}

func (s *Server) stopProcess() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case <-s.done:
	case <-ctx.Done():
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}
