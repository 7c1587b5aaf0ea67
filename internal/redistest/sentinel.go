package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartSentinel starts a Redis Sentinel on a free port that monitors master
// under the name masterName (quorum 1), and returns once it answers PING and
// knows the master's address. It stops in t.Cleanup. Clients such as
// go-redis' NewFailoverClient find the master through it.
func StartSentinel(t testing.TB, master *Server, masterName string) *Server {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	text := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 1000\n", masterName, master.port, masterName)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatalf("redistest: writing %s: %v", conf, err)
	}
	s := start(t, []string{"--sentinel"}, false, conf)
	deadline := time.Now().Add(startTimeout)
	for {
		addr, err := s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", masterName)
		if err == nil && addr == "127.0.0.1\n"+strconv.Itoa(master.port) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: sentinel on %s does not know master %s: %q %v", s.Addr(), masterName, strings.TrimSpace(addr), err)
		}
		time.Sleep(pollInterval)
	}
}
