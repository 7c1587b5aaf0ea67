package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
)

// TestServeNamedStore: serve opens the stores of stores:, charges each
// limit's budget in its store, reports each store on /readyz and in the
// metrics, and refuses a reload that changes stores.
func TestServeNamedStore(t *testing.T) { // not parallel: it sets an environment variable
	mainSrv, homeSrv := redistest.Start(t), redistest.Start(t)
	t.Setenv("TOKENLIMIT_TEST_STORE_HOME", homeSrv.URL())
	path := filepath.Join(t.TempDir(), "limits.yaml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(path+".tmp", []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	const limits = `
limits:
  - {name: global, key: [tenant], algorithm: fixed_window, limit: 3/h, store: home}
  - {name: local, key: [user], algorithm: fixed_window, limit: 100/h}
`
	write("stores:\n  home: {redis_env: TOKENLIMIT_TEST_STORE_HOME, timeout: 500ms}\n" + limits)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := newSyncBuffer()
	go func() {
		_ = Run(ctx, []string{"serve", "--config", path, "--redis", mainSrv.URL(), "--listen", "127.0.0.1:0", "--grpc-listen", "", "--reload-every", "20ms"}, logs.w, io.Discard)
		logs.w.Close()
	}()
	base := "http://" + logs.addr(t, "serving HTTP")
	check := func(body string) (allowed bool) {
		t.Helper()
		resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var d struct{ Allowed bool }
		if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	for i := range 4 {
		if got := check(`{"descriptors": {"tenant": "acme", "user": "u1"}}`); got != (i < 3) {
			t.Fatalf("request %d: allowed %v, want %v (global admits 3)", i, got, i < 3)
		}
	}
	keys := func(srv *redistest.Server, pattern string) string {
		t.Helper()
		out, err := srv.Do("KEYS", pattern)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if home, main := keys(homeSrv, "*global*"), keys(mainSrv, "*global*"); !strings.Contains(home, "acme") || strings.Contains(main, "acme") {
		t.Errorf("global's budget: home holds %q, main %q; want it in home alone", home, main)
	}
	if home, main := keys(homeSrv, "*local*"), keys(mainSrv, "*local*"); strings.Contains(home, "u1") || !strings.Contains(main, "u1") {
		t.Errorf("local's budget: home holds %q, main %q; want it in main alone", home, main)
	}

	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var ready struct {
		Status string
		Stores []struct {
			Name, Breaker string
			Degraded      bool
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&ready)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || len(ready.Stores) != 1 || ready.Stores[0].Name != "home" || ready.Stores[0].Breaker != "closed" || ready.Stores[0].Degraded {
		t.Errorf("/readyz: %d %+v %v, want ok with home's entry, closed", resp.StatusCode, ready, err)
	}
	metrics := func() string {
		t.Helper()
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		m, _ := io.ReadAll(resp.Body)
		return string(m)
	}
	for _, series := range []string{`tokenlimit_breaker_state{store="home"} 0`, `tokenlimit_breaker_state{store="default"} 0`} {
		if !strings.Contains(metrics(), series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
	if m := metrics(); strings.Contains(m, homeSrv.Addr()) && strings.Contains(m, "redis://") {
		t.Errorf("/metrics shows a store's URL")
	}

	// A reload that changes a store's URL is refused; the limits stay.
	write("stores:\n  home: {redis: \"redis://127.0.0.1:1\"}\n" + limits)
	testkit.Eventually(t, 20*time.Second, "the changed stores to be refused", func() bool {
		return strings.Contains(metrics(), `tokenlimit_config_reloads_total{result="error"} 1`)
	})
	if check(`{"descriptors": {"tenant": "acme"}}`) {
		t.Error("after the refused reload: global admitted a 4th request")
	}
}
