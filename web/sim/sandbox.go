package sim

import (
	"sync"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/httpx"
	"github.com/tokenlimit/tokenlimit/memstore"
)

// sandbox holds the simulator sessions. Each session has its own in-memory
// store and Limiter, so nothing a visitor does in a simulator can touch the
// service's budgets or another visitor's.
type sandbox struct {
	now  func() time.Time
	idle time.Duration
	max  int

	mu       sync.Mutex
	sessions map[string]*session
}

// session is one page's simulators: its store, its limiter, and the
// decisions each simulator took, for the page's logs.
type session struct {
	id      string
	store   *memstore.Store
	limiter *tokenlimit.Limiter
	used    time.Time // guarded by sandbox.mu

	mu     sync.Mutex // serializes the session's simulator calls
	window simState
	bucket simState
}

// simState is one simulator's limit (its parameters) and its decision log.
type simState struct {
	limit tokenlimit.Limit
	n     int
	log   []entry
}

// maxLog is how many decisions a simulator's log keeps.
const maxLog = 50

func newSandbox(now func() time.Time, idle time.Duration, max int) *sandbox {
	return &sandbox{now: now, idle: idle, max: max, sessions: map[string]*session{}}
}

// session returns the session id names, or a new one if id is empty or
// unknown (it expired, or the server restarted). Clients never choose an
// id: new ones are random.
func (sb *sandbox) session(id string) (*session, error) {
	now := sb.now()
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if s, ok := sb.sessions[id]; ok && now.Sub(s.used) < sb.idle {
		s.used = now
		return s, nil
	}
	sb.evict(now)
	store, err := memstore.New(memstore.Options{Shards: 1, MaxKeys: 16})
	if err != nil {
		return nil, err
	}
	limiter, err := tokenlimit.NewLimiter(store, tokenlimit.WithClock(sb.now))
	if err != nil {
		return nil, err
	}
	s := &session{id: httpx.NewID(), store: store, limiter: limiter, used: now}
	sb.sessions[s.id] = s
	return s, nil
}

// evict drops idle sessions and, if there are still too many, the least
// recently used one. The caller holds sb.mu.
func (sb *sandbox) evict(now time.Time) {
	var oldest *session
	for id, s := range sb.sessions {
		if now.Sub(s.used) >= sb.idle {
			delete(sb.sessions, id)
			continue
		}
		if oldest == nil || s.used.Before(oldest.used) {
			oldest = s
		}
	}
	if len(sb.sessions) >= sb.max && oldest != nil {
		delete(sb.sessions, oldest.id)
	}
}

// len returns the number of sessions kept.
func (sb *sandbox) len() int {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return len(sb.sessions)
}
