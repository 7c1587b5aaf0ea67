package config

import (
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Alerts says where the warnings of limits with alert_at go besides the
// metric and the log: a webhook, each event signed with the secret held
// in the environment variable SecretEnv. The zero value sends none.
type Alerts struct {
	// Webhook is an http or https URL; empty for none.
	Webhook string
	// SecretEnv names the environment variable holding the HMAC-SHA256
	// key of the webhook's signatures (the secret itself is never in the
	// file).
	SecretEnv string
}

type rawAlerts struct {
	Webhook   string `yaml:"webhook"`
	SecretEnv string `yaml:"secret_env"`
}

// alerts checks the top-level alerts section.
func (b *builder) alerts(r rawAlerts) Alerts {
	path := []any{"alerts"}
	if r.Webhook == "" {
		if r.SecretEnv != "" {
			b.fail(at(path, "secret_env"), "signs the webhook's events, and no webhook is set")
		}
		return Alerts{}
	}
	if u, err := url.Parse(r.Webhook); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		b.fail(at(path, "webhook"), "want an http or https URL, got %q", r.Webhook)
	}
	switch {
	case r.SecretEnv == "":
		b.fail(at(path, "secret_env"), "missing: name the environment variable that holds the webhook's signing secret")
	case os.Getenv(r.SecretEnv) == "":
		b.fail(at(path, "secret_env"), "the environment variable %s is empty or unset", r.SecretEnv)
	}
	return Alerts(r)
}

// alertAt applies alert_at, the thresholds of a budget's use that raise
// a warning: percentages from 1 to 100, written "80%" or 80, distinct.
// Not for concurrency limits, which hold slots that come back.
func (b *builder) alertAt(path []any, r *rawLimit, l *Limit) {
	if len(r.AlertAt) == 0 {
		return
	}
	if l.Concurrency {
		b.fail(at(path, "alert_at"), "a concurrency limit holds slots that come back: it has no budget to warn about")
		return
	}
	for i, s := range r.AlertAt {
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(s), "%"))
		switch {
		case err != nil || n < 1 || n > 100:
			b.fail(at(path, "alert_at", i), "want a percentage from 1%% to 100%%, got %q", s)
		case slices.Contains(l.AlertAt, n):
			b.fail(at(path, "alert_at", i), "%d%% is listed twice", n)
		default:
			l.AlertAt = append(l.AlertAt, n)
		}
	}
	slices.Sort(l.AlertAt)
}
