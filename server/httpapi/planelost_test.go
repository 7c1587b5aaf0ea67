package httpapi_test

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/tcprelay"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/plane"
	"github.com/tokenlimit/tokenlimit/plane/redisplane"
	"github.com/tokenlimit/tokenlimit/server/httpapi"
	"github.com/tokenlimit/tokenlimit/service"
)

var lostPrefixes atomic.Int64

// lostEnv is an API whose plane is on a redis-server reached through a
// relay, so that a test can lose an admin write's request or its reply.
type lostEnv struct {
	*env
	srv   *redistest.Server
	relay *tcprelay.Relay
	plane *plane.Plane
	seq   string // the plane's sequence key in Redis
}

func newLostEnv(t *testing.T, srv *redistest.Server) *lostEnv {
	t.Helper()
	relay, err := tcprelay.Start(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	// One connection: a write rueidis sent on a second one, opened while
	// the relay holds the replies, would wait for its handshake's reply.
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{relay.Addr()}, DisableCache: true, PipelineMultiplex: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	prefix := fmt.Sprintf("lost%d", lostPrefixes.Add(1))
	store := redisplane.New(func() (rueidis.Client, error) { return rc, nil }, redisplane.Options{Prefix: prefix})
	var svc *service.Service
	p, err := plane.Open(context.Background(), store, plane.Options{KnownPlan: func(n string) bool { return svc.KnownPlan(n) }, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, memBackend(), setup{config: planeConfig, svc: func(o *service.Options) { o.Plane = p },
		opts: httpapi.Options{AdminToken: "admintoken", Plane: p, AdminName: "ops"}})
	svc = e.svc
	return &lostEnv{env: e, srv: srv, relay: relay, plane: p, seq: "{" + prefix + "}:seq"}
}

// follow has the plane follow Redis' writes until the test ends. Not
// before a test has held the relay: its reads of Redis, on the writes'
// connection, would hold the writes back.
func (l *lostEnv) follow() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.plane.Run(ctx) }()
	l.t.Cleanup(func() { cancel(); <-done })
}

// storedSeq is the plane's sequence number in Redis: it moves with every
// write that lands.
func (l *lostEnv) storedSeq() string {
	l.t.Helper()
	v, err := l.srv.Do("GET", l.seq)
	if err != nil && err != redistest.ErrNil {
		l.t.Fatal(err)
	}
	return v
}

// async sends a request and returns where its answer will arrive.
func (l *lostEnv) async(method, path, body string) <-chan response {
	out := make(chan response, 1)
	go func() { out <- l.do(method, path, body, admin) }()
	return out
}

// waitLanded waits until the write whose answer is to come has landed in
// Redis (the sequence moved past before), failing if it answers first.
func (l *lostEnv) waitLanded(before string, answer <-chan response) {
	l.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.storedSeq() == before {
		select {
		case r := <-answer:
			l.t.Fatalf("the write answered %d %s before it landed", r.status, r.body)
		case <-time.After(5 * time.Millisecond): // polling Redis, until the deadline
		}
		if time.Now().After(deadline) {
			l.t.Fatal("the write has not landed in Redis within 10 s")
		}
	}
}

// lostWrite is one admin write of a test: what to send, given the key
// made for the test, and what a landed write answers.
type lostWrite struct {
	name         string
	method, path string // path's %s is the key's id
	body         string
	landed       int
}

var lostWrites = []lostWrite{
	{"create a team", http.MethodPost, "/v1/admin/teams", `{"name": "beta"}`, http.StatusCreated},
	{"create a key", http.MethodPost, "/v1/admin/keys", `{"name": "laptop", "team": "acme"}`, http.StatusCreated},
	{"update a key", http.MethodPut, "/v1/admin/keys/%s", `{"name": "renamed", "team": "acme"}`, http.StatusOK},
	{"rotate a key", http.MethodPost, "/v1/admin/keys/%s/rotate", `{}`, http.StatusOK},
	{"revoke a key", http.MethodDelete, "/v1/admin/keys/%s", ``, http.StatusNoContent},
}

// setUp makes the team and key a write works on; it returns the write's
// path.
func (l *lostEnv) setUp(w lostWrite) string {
	l.t.Helper()
	if r := l.post("/v1/admin/teams", `{"name": "acme"}`, admin); r.status != http.StatusCreated {
		l.t.Fatalf("POST team: %d %s", r.status, r.body)
	}
	r := l.post("/v1/admin/keys", `{"name": "k", "team": "acme"}`, admin)
	if r.status != http.StatusCreated {
		l.t.Fatalf("POST key: %d %s", r.status, r.body)
	}
	id := r.json(l.t)["id"].(string)
	return strings.ReplaceAll(w.path, "%s", id)
}

// landWithReplyHeld makes the team and key w works on (setUp), sends w
// with Redis's replies held at the relay, and returns once the write has
// landed in Redis: the write's path, and where its answer will arrive.
func (l *lostEnv) landWithReplyHeld(w lostWrite) (string, <-chan response) {
	l.t.Helper()
	path := l.setUp(w)
	before := l.storedSeq()
	l.relay.Hold(tcprelay.Replies)
	answer := l.async(w.method, path, w.body)
	l.waitLanded(before, answer)
	return path, answer
}

// TestPlaneWriteReplyLost: an admin write that reached Redis and whose
// reply was lost (the connection closed while the relay held it) answers
// as the write did, once the store has asked Redis: the record is as
// written, its ETag the version Redis gave it, a new secret usable.
func TestPlaneWriteReplyLost(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, w := range lostWrites {
		t.Run(w.name, func(t *testing.T) {
			t.Parallel()
			l := newLostEnv(t, srv)
			path, answer := l.landWithReplyHeld(w)
			l.relay.Cut() // the held reply is lost with the connection
			l.relay.Release(tcprelay.Replies)
			r := <-answer
			if r.status != w.landed {
				t.Fatalf("%s %s whose reply was lost: %d %s, want %d", w.method, path, r.status, r.body, w.landed)
			}
			if w.method == http.MethodDelete {
				if g := l.do(http.MethodGet, path, "", admin); g.status != http.StatusNotFound {
					t.Fatalf("GET the revoked key: %d %s, want 404", g.status, g.body)
				}
				return
			}
			if tag := r.header.Get("ETag"); tag != `"`+l.storedSeq()+`"` {
				t.Errorf("ETag %s, want the version Redis gave the write, %q", tag, l.storedSeq())
			}
			body := r.json(t)
			if secret, ok := body["secret"].(string); ok {
				if c := l.post("/v1/check", `{"descriptors": {"api_key": "`+secret+`"}}`); c.status != http.StatusOK {
					t.Errorf("a call with the secret answered: %d %s", c.status, c.body)
				}
			}
			record := cmp.Or(r.header.Get("Location"), strings.TrimSuffix(path, "/rotate"))
			if got := l.do(http.MethodGet, record, "", admin); got.status != http.StatusOK || got.header.Get("ETag") != r.header.Get("ETag") {
				t.Errorf("GET after the write: %d %s (ETag %s), want 200 with ETag %s", got.status, got.body, got.header.Get("ETag"), r.header.Get("ETag"))
			}
		})
	}
}

// TestPlaneWriteLostOnTheWay: an admin write lost before it reached Redis
// (the connection closed while the relay held the request) answers 503
// saying that nothing changed, and Redis has fenced the write, so that it
// could not land later either.
func TestPlaneWriteLostOnTheWay(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, w := range lostWrites {
		t.Run(w.name, func(t *testing.T) {
			t.Parallel()
			l := newLostEnv(t, srv)
			path := l.setUp(w)
			before := l.storedSeq()
			sent := l.relay.Read(tcprelay.Requests)
			l.relay.Hold(tcprelay.Requests)
			answer := l.async(w.method, path, w.body)
			testkit.Eventually(t, 10*time.Second, "the write at the relay", func() bool { return l.relay.Read(tcprelay.Requests) > sent })
			l.relay.Cut() // the held request is lost with the connection
			l.relay.Release(tcprelay.Requests)
			r := <-answer
			if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, "nothing changed") {
				t.Fatalf("%s %s lost on its way: %d %s, want 503 saying that nothing changed", w.method, path, r.status, r.body)
			}
			if got := l.storedSeq(); got != before {
				t.Errorf("the plane's sequence moved from %s to %s: a write landed", before, got)
			}
			fences, err := l.srv.Do("EVAL", `local out = {} for _, k in ipairs(redis.call('KEYS', ARGV[1])) do table.insert(out, redis.call('GET', k)) end return out`, "0", strings.TrimSuffix(l.seq, "seq")+"write:*")
			if err != nil || !strings.Contains(fences, "fenced") {
				t.Errorf("the write tokens in Redis: %q %v, want one fenced", fences, err)
			}
		})
	}
}

// TestPlaneWriteOutcomeUnknown: an admin write that reached Redis, whose
// reply was lost with Redis then out of reach, answers 503 saying that it
// may or may not have been applied and which record to GET to know; once
// Redis is back, that GET finds the write.
func TestPlaneWriteOutcomeUnknown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, w := range lostWrites {
		t.Run(w.name, func(t *testing.T) {
			t.Parallel()
			l := newLostEnv(t, srv)
			path, answer := l.landWithReplyHeld(w)
			if err := l.relay.Close(); err != nil { // the reply lost, Redis out of reach
				t.Fatal(err)
			}
			r := <-answer
			if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, "may or may not") || strings.Contains(r.body, "nothing changed") {
				t.Fatalf("%s %s with its outcome unknown: %d %s, want 503 saying it may or may not have been applied", w.method, path, r.status, r.body)
			}
			check := regexp.MustCompile(`GET (/v1/admin/(?:teams|keys)/[a-z0-9_]+)`).FindStringSubmatch(r.body)
			if check == nil {
				t.Fatalf("the answer %s names no record to GET", r.body)
			}
			if w.method != http.MethodPost || strings.Contains(w.path, "%s") {
				if want := strings.TrimSuffix(path, "/rotate"); check[1] != want {
					t.Errorf("the answer names %s, want %s", check[1], want)
				}
			}
			l.relay.Release(tcprelay.Replies)
			if err := l.relay.Reopen(); err != nil {
				t.Fatal(err)
			}
			// The GET the answer names shows the write once the plane
			// follows Redis.
			l.follow()
			testkit.Eventually(t, 10*time.Second, "GET "+check[1]+" showing the write", func() bool {
				g := l.do(http.MethodGet, check[1], "", admin)
				if w.method == http.MethodDelete {
					return g.status == http.StatusNotFound
				}
				return g.status == http.StatusOK && g.header.Get("ETag") == `"`+l.storedSeq()+`"`
			})
		})
	}
}
