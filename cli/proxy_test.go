package cli

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/tokenlimit/tokenlimit/proxy"
)

// TestProxyHelpHidesTheUpstreamKey: the key in $TOKENLIMIT_UPSTREAM_KEY is
// read after the flags, not shown as --upstream-key's default.
func TestProxyHelpHidesTheUpstreamKey(t *testing.T) {
	const secret = "sk-upstream-secret-0123456789"
	t.Setenv("TOKENLIMIT_UPSTREAM_KEY", secret)
	var out bytes.Buffer
	if err := Run(context.Background(), []string{"proxy", "--help"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "--upstream-key") || strings.Contains(out.String(), secret) {
		t.Errorf("proxy --help prints the upstream key, or no --upstream-key:\n%s", out.String())
	}
	if got := upstreamKey(""); got != secret {
		t.Errorf("upstreamKey(\"\") = %q, want the environment's %q", got, secret)
	}
	if got := upstreamKey("sk-flag"); got != "sk-flag" {
		t.Errorf("upstreamKey(\"sk-flag\") = %q, want the flag's", got)
	}
}

// TestUnknownKeysRejectedByDefault: without --unknown-keys, unknown keys are
// rejected, even when the configuration has a default_plan.
func TestUnknownKeysRejectedByDefault(t *testing.T) {
	t.Parallel()
	cmd := proxyCommand()
	if err := cmd.ParseFlags(nil); err != nil {
		t.Fatal(err)
	}
	flag, _ := cmd.Flags().GetString("unknown-keys")
	for _, s := range []string{flag, ""} {
		if got, err := unknownKeysPolicy(s); err != nil || got != proxy.RejectUnknownKeys {
			t.Errorf("unknownKeysPolicy(%q) = %v, %v; want reject", s, got, err)
		}
	}
	if got, err := unknownKeysPolicy("default"); err != nil || got != proxy.DefaultPlanForUnknownKeys {
		t.Errorf("unknownKeysPolicy(default) = %v, %v", got, err)
	}
	if err := Run(context.Background(), []string{"proxy", "--config", "../examples/proxy.yaml", "--upstream", "http://127.0.0.1:1", "--unknown-keys", "maybe"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "--unknown-keys") {
		t.Errorf("--unknown-keys maybe: %v, want an error naming the flag", err)
	}
}
