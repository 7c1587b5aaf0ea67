package cli

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/snapshot"
)

// budgetsConfig has a calendar day's quota and a spend-like hour: both
// long enough to be kept across a restart.
const budgetsConfig = `
limits:
  - {name: daily, key: [user], algorithm: fixed_window, limit: 1000/day, calendar: day}
`

// TestBudgetsSurviveRestart: with --data-dir, the embedded store's daily
// budget keeps what was charged across a graceful restart (SIGTERM), and
// across a SIGKILL once a snapshot holding the charge was written (the
// most a crash loses is what was charged since the last snapshot, written
// every snapshot.DefaultInterval).
func TestBudgetsSurviveRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "limits.yaml")
	if err := os.WriteFile(cfg, []byte(budgetsConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	args := []string{"serve", "--listen", "127.0.0.1:0", "--grpc-listen", "", "--config", cfg, "--data-dir", data}
	remaining := func(base string, cost int) float64 {
		t.Helper()
		code, body := call(t, http.MethodPost, base+"/v1/check", `{"descriptors": {"user": "alice"}, "cost": `+strconv.Itoa(cost)+`}`)
		if code != http.StatusOK {
			t.Fatalf("check: %d %v", code, body)
		}
		return body["limits"].([]any)[0].(map[string]any)["remaining"].(float64)
	}

	cmd, base := child(t, args...)
	if r := remaining(base, 100); r != 900 {
		t.Fatalf("first charge: remaining %v, want 900", r)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v", err)
	}

	cmd, base = child(t, args...)
	if r := remaining(base, 50); r != 850 {
		t.Fatalf("after a graceful restart: remaining %v, want 850", r)
	}
	// Wait for a snapshot holding the second charge, then crash.
	path := filepath.Join(data, snapshot.FileName)
	deadline := time.Now().Add(4 * snapshot.DefaultInterval)
	for snapshotCount(t, path) != 150 {
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot holding 150 within %v", 4*snapshot.DefaultInterval)
		}
		time.Sleep(50 * time.Millisecond) // polling the file, not waiting out the interval
	}
	cmd.Process.Kill()
	cmd.Wait()

	_, base = child(t, args...)
	if r := remaining(base, 1); r != 849 {
		t.Fatalf("after SIGKILL: remaining %v, want 849", r)
	}
}

// snapshotCount is the daily budget's count in the snapshot at path, 0 if there
// is none yet.
func snapshotCount(t *testing.T, path string) int64 {
	t.Helper()
	saved, err := snapshot.Read(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0
		}
		t.Fatal(err)
	}
	for _, b := range saved {
		if strings.HasPrefix(b.Key, "daily|") {
			return b.State[1]
		}
	}
	return 0
}
