package cli

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/service"
)

// adminTokenHelp is --admin-token's help on the servers (serve, proxy).
const adminTokenHelp = "admin bearer tokens: TOKEN (named admin), NAME:TOKEN, or @FILE of NAME:TOKEN lines, reloaded when the file changes; each change is logged under the token's name (default $TOKENLIMIT_ADMIN_TOKEN; empty: admin endpoints off)"

// authFailuresHelp is --auth-failures' help, the budget it sets being the
// one of both servers.
const authFailuresHelp = "failed authentications (401: a wrong api key on the proxy, a wrong admin token on either server) allowed per client (an ip; an IPv6 /64), as N/period: N at once, then N per period; past it the client gets 429 until one more is allowed"

// adminTokens is a server's --admin-token value (else
// $TOKENLIMIT_ADMIN_TOKEN, read here, not as the flag's default, which
// --help would print) and, when it is @FILE, the file: a changed file's
// tokens replace the gate's, a bad or unreadable one keeps the last good
// ones and is logged once, never a token.
type adminTokens struct {
	tokens map[string]string // at start
	path   string            // the @FILE, "" for none
	gate   *httpx.AdminGate  // set by newGate
	log    *slog.Logger
	// last is the digest of the content last read; unreadable says the
	// last read failed. Each change of either is read (and logged) once.
	last       [sha256.Size]byte
	unreadable bool
}

// serverAdminTokens reads a server's --admin-token value; see
// httpx.ParseAdminTokens.
func serverAdminTokens(value string, log *slog.Logger) (*adminTokens, error) {
	if value == "" {
		value = os.Getenv("TOKENLIMIT_ADMIN_TOKEN")
	}
	a := &adminTokens{log: log}
	path, isFile := strings.CutPrefix(value, "@")
	var err error
	a.tokens, err = httpx.ParseAdminTokens(value, func(name string) ([]byte, error) {
		data, err := os.ReadFile(name)
		a.last = sha256.Sum256(data)
		return data, err
	})
	if err != nil {
		return nil, err
	}
	if isFile {
		a.path = path
	}
	return a, nil
}

// newGate returns the server's admin gate: its tokens, its failed attempts
// counted by svc against the budget lim per client.
func (a *adminTokens) newGate(svc *service.Service, fromAnywhere bool, lim tokenlimit.Limit) *httpx.AdminGate {
	a.gate = httpx.NewAdminGate(a.tokens, fromAnywhere, httpx.NewAuthFailures(svc, lim))
	return a.gate
}

// authFailuresLimit reads --auth-failures, N/period: a token bucket of N
// refilled N per period.
func authFailuresLimit(s string) (tokenlimit.Limit, error) {
	n, per, err := config.ParseRate(s)
	if err == nil {
		lim := tokenlimit.TokenBucketLimit(n, n, per)
		if err = lim.Validate(); err == nil {
			return lim, nil
		}
	}
	return tokenlimit.Limit{}, fmt.Errorf("--auth-failures %q: %w: %w", s, err, errUsage)
}

// watch reloads the file into the gate on SIGHUP and, every interval (0:
// never), when it changed, until ctx ends. Nothing to do without a file.
func (a *adminTokens) watch(ctx context.Context, every time.Duration) {
	if a.path == "" {
		return
	}
	watchReloads(ctx, every, a.changed, a.reload)
}

// changed reports whether the file differs from what reload read last:
// other content, or readable again, or unreadable for the first time.
func (a *adminTokens) changed() bool {
	data, err := os.ReadFile(a.path)
	if err != nil {
		return !a.unreadable
	}
	return a.unreadable || sha256.Sum256(data) != a.last
}

// reload reads the file into the gate; a file that cannot be read or
// parsed leaves the gate's tokens as they are.
func (a *adminTokens) reload() {
	data, err := os.ReadFile(a.path)
	if err != nil {
		a.unreadable = true
		a.log.Error("admin tokens file unreadable: keeping the tokens in force", "file", a.path, "error", err)
		return
	}
	a.unreadable, a.last = false, sha256.Sum256(data)
	tokens, err := httpx.ParseAdminTokens("@"+a.path, func(string) ([]byte, error) { return data, nil })
	if err != nil { // its errors never hold a token
		a.log.Error("admin tokens file rejected: keeping the tokens in force", "file", a.path, "error", err)
		return
	}
	a.gate.SetTokens(tokens)
	a.log.Info("admin tokens reloaded", "file", a.path, "names", slices.Sorted(maps.Keys(tokens)))
}
