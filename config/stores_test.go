package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/config"
)

func TestParseStores(t *testing.T) {
	t.Setenv("TOKENLIMIT_TEST_HOME_URL", "redis://:s3cret@10.0.0.9:6380/2")
	cfg, err := config.Parse([]byte(`
stores:
  home: {redis_env: TOKENLIMIT_TEST_HOME_URL, timeout: 250ms}
  eu: {redis: "redis://10.0.0.5:6379/0"}
limits:
  - {name: global, algorithm: fixed_window, limit: 1000/min, store: home}
  - {name: regional, algorithm: fixed_window, limit: 100/min, store: eu}
  - {name: local, algorithm: fixed_window, limit: 10/min}
`), "stores.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]config.Store{
		"home": {URL: "redis://:s3cret@10.0.0.9:6380/2", Env: "TOKENLIMIT_TEST_HOME_URL", Timeout: 250 * time.Millisecond},
		"eu":   {URL: "redis://10.0.0.5:6379/0"},
	}
	if len(cfg.Stores) != len(want) {
		t.Fatalf("Stores = %+v, want %+v", cfg.Stores, want)
	}
	for name, w := range want {
		if got := cfg.Stores[name]; got != w {
			t.Errorf("Stores[%s] = %+v, want %+v", name, got, w)
		}
	}
	for i, store := range []string{"home", "eu", ""} {
		if got := cfg.Limits[i].Store; got != store {
			t.Errorf("limits[%d].Store = %q, want %q", i, got, store)
		}
	}
	if got := cfg.Stores["home"].Redacted(); strings.Contains(got, "s3cret") || !strings.Contains(got, "10.0.0.9:6380") {
		t.Errorf("Redacted() = %q, want the address without the password", got)
	}
}

// TestStoreErrorsHideThePassword: a URL that does not parse, or parses
// as something else, is refused without repeating its password.
func TestStoreErrorsHideThePassword(t *testing.T) {
	for _, u := range []string{"redis://:hunter2@10.0.0.5:6379/%zz", "http://user:hunter2@10.0.0.5/", "redis://:hunter2@/0", "redis ://:hunter2@x"} {
		_, err := config.Parse([]byte("stores: {home: {redis: \""+u+"\"}}\nlimits: [{name: a, algorithm: fixed_window, limit: 1/s, store: home}]\n"), "s.yaml")
		if err == nil || !strings.Contains(err.Error(), "stores.home.redis: ") {
			t.Errorf("%s: error %v, want one naming stores.home.redis", u, err)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: error %q repeats the password", u, err)
		}
	}
}
