package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestStartPing(t *testing.T) {
	t.Parallel()
	s := Start(t)
	got, err := s.Do("PING")
	if err != nil || got != "PONG" {
		t.Fatalf("Do(PING) = %q, %v; want PONG, nil", got, err)
	}
	if want := "redis://" + s.Addr() + "/0"; s.URL() != want {
		t.Errorf("URL() = %q, want %q", s.URL(), want)
	}
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || s.Addr() == "127.0.0.1:6379" {
		t.Errorf("Addr() = %q, want a free 127.0.0.1 port", s.Addr())
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	s := Start(t, WithArgs("--maxmemory", "10mb"))
	for _, c := range []struct{ param, want string }{
		{"save", ""},
		{"appendonly", "no"},
		{"bind", "127.0.0.1"},
		{"maxmemory", "10485760"},
	} {
		got, err := s.Do("CONFIG", "GET", c.param)
		if want := c.param + "\n" + c.want; err != nil || got != want {
			t.Errorf("CONFIG GET %s = %q, %v; want %q", c.param, got, err, want)
		}
	}
	if got, err := s.Do("DEBUG", "SLEEP", "0"); err != nil || got != "OK" {
		t.Errorf("DEBUG SLEEP 0 = %q, %v; want OK", got, err)
	}
}

func TestDoReplies(t *testing.T) {
	t.Parallel()
	s := Start(t)
	steps := []struct {
		args    []string
		want    string
		wantErr error
	}{
		{[]string{"SET", "k", "hello\r\nworld"}, "OK", nil},
		{[]string{"GET", "k"}, "hello\r\nworld", nil},
		{[]string{"GET", "missing"}, "", ErrNil},
		{[]string{"SET", "empty", ""}, "OK", nil},
		{[]string{"GET", "empty"}, "", nil},
		{[]string{"INCRBY", "n", "41"}, "41", nil},
		{[]string{"RPUSH", "l", "a", "", "c"}, "3", nil},
		{[]string{"LRANGE", "l", "0", "-1"}, "a\n\nc", nil},
		{[]string{"EVAL", "return {1, {'x', 'y'}, false}", "0"}, "1\nx\ny\n", nil},
		{[]string{"PTTL", "k"}, "-1", nil},
	}
	for _, st := range steps {
		got, err := s.Do(st.args...)
		if got != st.want || !errors.Is(err, st.wantErr) {
			t.Errorf("Do(%q) = %q, %v; want %q, %v", st.args, got, err, st.want, st.wantErr)
		}
	}

	_, err := s.Do("EVALSHA", "0000000000000000000000000000000000000000", "0")
	var re ReplyError
	if !errors.As(err, &re) || !strings.HasPrefix(string(re), "NOSCRIPT") {
		t.Errorf("EVALSHA of an unknown script: err = %v, want a NOSCRIPT ReplyError", err)
	}
	if _, err := s.Do(); err == nil {
		t.Error("Do() with no command: err = nil, want an error")
	}
}

func TestRestart(t *testing.T) {
	t.Parallel()
	s := Start(t)
	addr := s.Addr()
	if _, err := s.Do("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}

	s.Stop()
	s.Stop() // idempotent
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("Do(PING) on a stopped server: err = nil, want a connection error")
	}

	s.Restart()
	if s.Addr() != addr {
		t.Errorf("Addr() after Restart = %q, want %q", s.Addr(), addr)
	}
	if got, err := s.Do("PING"); err != nil || got != "PONG" {
		t.Fatalf("Do(PING) after Restart = %q, %v; want PONG", got, err)
	}
	if got, err := s.Do("GET", "k"); !errors.Is(err, ErrNil) {
		t.Errorf("GET k after Restart = %q, %v; want ErrNil (nothing is persisted)", got, err)
	}

	s.Restart() // of a running server
	if got, err := s.Do("PING"); err != nil || got != "PONG" {
		t.Fatalf("Do(PING) after second Restart = %q, %v; want PONG", got, err)
	}
}

func TestStartCluster(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3)
	if n := len(c.Addrs()); n != 3 {
		t.Fatalf("len(Addrs()) = %d, want 3", n)
	}
	for i, addr := range c.Addrs() {
		info, err := c.Node(i).Do("CLUSTER", "INFO")
		if err != nil {
			t.Fatalf("node %d (%s): CLUSTER INFO: %v", i, addr, err)
		}
		fields := parseInfo(info)
		for k, want := range map[string]string{
			"cluster_state":          "ok",
			"cluster_slots_assigned": "16384",
			"cluster_slots_ok":       "16384",
			"cluster_known_nodes":    "3",
			"cluster_size":           "3",
		} {
			if fields[k] != want {
				t.Errorf("node %d: %s = %q, want %q", i, k, fields[k], want)
			}
		}
	}

	// Key "a" hashes to slot 15495, served by the last node.
	if got, err := c.Node(2).Do("SET", "a", "1"); err != nil || got != "OK" {
		t.Errorf("SET a on its owner = %q, %v; want OK", got, err)
	}
	_, err := c.Node(0).Do("SET", "a", "1")
	var re ReplyError
	if !errors.As(err, &re) || !strings.HasPrefix(string(re), "MOVED 15495 "+c.Addrs()[2]) {
		t.Errorf("SET a on another node: err = %v, want MOVED 15495 %s", err, c.Addrs()[2])
	}

	c.Stop()
	c.Stop()
	if _, err := c.Node(0).Do("PING"); err == nil {
		t.Error("Do(PING) after Stop: err = nil, want a connection error")
	}
}

func TestStartClusterTooSmall(t *testing.T) {
	t.Parallel()
	ft := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		StartCluster(ft, 2)
	}()
	<-done
	if !strings.Contains(ft.msg, "at least 3 masters") {
		t.Errorf("StartCluster(t, 2) failed with %q, want a message about 3 masters", ft.msg)
	}
}

// fatalRecorder records the first Fatalf and stops the calling goroutine.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func parseInfo(info string) map[string]string {
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if ok {
			m[k] = v
		}
	}
	return m
}

func TestSentinelKnowsItsMaster(t *testing.T) {
	t.Parallel()
	master := Start(t)
	s := StartSentinel(t, master, "mymaster")
	got, err := s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster")
	if err != nil || got != "127.0.0.1\n"+master.Addr()[len("127.0.0.1:"):] {
		t.Fatalf("SENTINEL GET-MASTER-ADDR-BY-NAME: %q %v, want the master %s", got, err, master.Addr())
	}
}

func TestReplicatedClusterFailsOver(t *testing.T) {
	t.Parallel()
	c := StartReplicatedCluster(t, 3)
	for i := range 3 {
		info, err := c.Replica(i).Do("CLUSTER", "INFO")
		if err != nil {
			t.Fatalf("replica %d: CLUSTER INFO: %v", i, err)
		}
		if f := parseInfo(info); f["cluster_known_nodes"] != "6" || f["cluster_size"] != "3" || f["cluster_state"] != "ok" {
			t.Errorf("replica %d: %v, want 6 nodes, 3 masters, ok", i, f)
		}
	}
	i, err := c.NodeOf("a")
	if err != nil || i != 2 {
		t.Fatalf("NodeOf(a) = %d, %v; want 2 (slot 15495)", i, err)
	}
	if _, err := c.Node(i).Do("SET", "a", "1"); err != nil {
		t.Fatal(err)
	}
	// CatchUpReplica returns once the replica holds every write: no poll.
	if err := c.CatchUpReplica(i, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Replica(i).Do("DBSIZE"); err != nil || n != "1" {
		t.Fatalf("replica's DBSIZE after CatchUpReplica = %q, %v; want the write replicated", n, err)
	}
	c.Node(i).Kill()
	if _, err := c.Node(i).Do("PING"); err == nil {
		t.Fatal("PING after Kill: err = nil, want a connection error")
	}
	if err := c.WaitFailover(i); err != nil {
		nodes, _ := c.Node((i+1)%3).Do("CLUSTER", "NODES")
		t.Fatalf("%v\nCLUSTER NODES:\n%s\nthe replica: %s\nthe other masters, which vote:\n%s\n%s",
			err, nodes, c.Replica(i).logTail(), c.Node((i+1)%3).logTail(), c.Node((i+2)%3).logTail())
	}
	if got, err := c.Replica(i).Do("GET", "a"); err != nil || got != "1" {
		t.Errorf("GET a on the promoted replica = %q, %v; want 1\n%s", got, err, c.Replica(i).logTail())
	}
}
