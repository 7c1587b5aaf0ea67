package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/redisstore"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
	"github.com/tokenlimit/tokenlimit/storekit"
)

// How redisConn dials: the first attempt is waited for at most firstDialWait
// (so that a Redis that is up serves the first request), then attempts go on
// in the background, spaced from dialBackoffMin doubling to dialBackoffMax.
const (
	firstDialWait  = 2 * time.Second
	dialBackoffMin = 100 * time.Millisecond
	dialBackoffMax = 2 * time.Second
)

// errNotConnected marks a call made before the first connection to Redis.
var errNotConnected = errors.New("not connected yet")

// redisConn is the Redis store behind --redis. It connects in the
// background, so that serve starts (and answers through each limit's failure
// mode) while Redis is unreachable: until the first connection succeeds every
// call fails at once with an error naming the address and the last dial
// error, and from then on calls go to Redis, whose client reconnects by
// itself. It implements tokenlimit.Store, tokenlimit.LogReader and
// tokenlimit.Describer and is safe for concurrent use.
type redisConn struct {
	addrs string // for errors and logs
	log   *slog.Logger

	tried     chan struct{} // closed once the first attempt has ended
	triedOnce sync.Once
	stop      chan struct{} // closed by close
	done      chan struct{} // closed when the dialer has returned

	mu      sync.Mutex
	store   *redisstore.Store // nil until connected
	client  rueidis.Client
	lastErr error
	closed  bool
}

var (
	_ tokenlimit.Store     = (*redisConn)(nil)
	_ tokenlimit.LogReader = (*redisConn)(nil)
	_ tokenlimit.Describer = (*redisConn)(nil)
)

// Describe implements tokenlimit.Describer: "redis", remote, connected or
// not.
func (c *redisConn) Describe() tokenlimit.StoreInfo {
	return tokenlimit.StoreInfo{Name: "redis", Remote: true}
}

// dialRedis parses url (an error names --redis) and starts connecting. It
// returns once the first attempt has ended, or after firstDialWait with it
// still under way (a Redis host that drops packets).
func dialRedis(url string, log *slog.Logger) (*redisConn, error) {
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("--redis %q: %w", url, err)
	}
	return startRedis(opt, log), nil
}

// dialNamedRedis is dialRedis for the store name of stores: (an error
// names it, and never shows the URL's password).
func dialNamedRedis(name string, st config.Store, log *slog.Logger) (*redisConn, error) {
	opt, err := rueidis.ParseURL(st.URL)
	if err != nil {
		msg := err.Error()
		if u, perr := neturl.Parse(st.URL); perr == nil {
			if pw, ok := u.User.Password(); ok && pw != "" {
				msg = strings.ReplaceAll(msg, pw, "xxxxx")
			}
		}
		return nil, fmt.Errorf("stores.%s: %s: %s", name, st.Redacted(), msg)
	}
	return startRedis(opt, log), nil
}

// startRedis starts connecting with opt, as dialRedis says.
func startRedis(opt rueidis.ClientOption, log *slog.Logger) *redisConn {
	opt.DisableCache = true
	// A call's connection, dialled on the call's context, never holds the
	// call past its deadline (see rueidisclient.Dial).
	opt.DialCtxFn = rueidisclient.Dial
	c := &redisConn{
		addrs: strings.Join(opt.InitAddress, ","), log: log,
		tried: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go c.dial(opt)
	select {
	case <-c.tried:
	case <-time.After(firstDialWait):
	}
	if _, err := c.current(); err != nil {
		log.Warn("Redis does not answer yet; limits follow their failure modes until it does", "error", err)
	}
	return c
}

// dial tries to connect until it succeeds or close is called.
func (c *redisConn) dial(opt rueidis.ClientOption) {
	defer close(c.done)
	wait := dialBackoffMin
	defer c.triedOnce.Do(func() { close(c.tried) })
	for attempt := 1; ; attempt++ {
		client, err := rueidis.NewClient(opt)
		if err == nil {
			err = c.connected(client)
			if err == nil {
				return
			}
		}
		c.mu.Lock()
		c.lastErr = err
		c.mu.Unlock()
		c.triedOnce.Do(func() { close(c.tried) })
		if attempt%10 == 0 {
			c.log.Warn("connecting to Redis failed; trying again", "redis", c.addrs, "attempt", attempt, "error", err)
		}
		select {
		case <-c.stop:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, dialBackoffMax)
	}
}

// connected builds the store on client and publishes it, unless close came
// first.
func (c *redisConn) connected(client rueidis.Client) error {
	// On Cluster, a request's limits may lie in several slots: decide them
	// slot by slot, refunding on a denial (see redisstore.Options.Cluster).
	st, err := redisstore.New(rueidisclient.New(client), redisstore.Options{Cluster: client.Mode() == rueidis.ClientModeCluster})
	if err != nil {
		client.Close()
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		client.Close()
		return nil
	}
	c.store, c.client, c.lastErr = st, client, nil
	c.log.Info("connected to Redis", "redis", c.addrs)
	return nil
}

// current returns the store, or an error saying why there is none yet.
func (c *redisConn) current() (*redisstore.Store, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.store != nil {
		return c.store, nil
	}
	return nil, c.notConnected()
}

// notConnected says why there is no client yet. Called with c.mu held.
func (c *redisConn) notConnected() error {
	if c.lastErr != nil {
		return fmt.Errorf("redis %s: %w: %w", c.addrs, errNotConnected, c.lastErr)
	}
	return fmt.Errorf("redis %s: %w", c.addrs, errNotConnected)
}

// rueidis returns the client, or an error saying why there is none yet.
func (c *redisConn) rueidis() (rueidis.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.client != nil {
		return c.client, nil
	}
	return nil, c.notConnected()
}

// close stops dialing and closes the client. Calls after it fail.
func (c *redisConn) close() {
	c.mu.Lock()
	c.closed = true
	client := c.client
	c.mu.Unlock()
	close(c.stop)
	<-c.done
	if client != nil {
		client.Close()
	}
}

// Check implements tokenlimit.Store.
func (c *redisConn) Check(ctx context.Context, now time.Time, items []tokenlimit.Item, results []tokenlimit.Result) (time.Time, error) {
	st, err := c.current()
	if err != nil {
		if verr := storekit.ValidateItems(items, results); verr != nil {
			return time.Time{}, fmt.Errorf("redisstore: %w", verr) // bad input is bad input, connected or not
		}
		return time.Time{}, err
	}
	return st.Check(ctx, now, items, results)
}

// Adjust implements tokenlimit.Store.
func (c *redisConn) Adjust(ctx context.Context, now time.Time, adjustments []tokenlimit.Adjustment) error {
	st, err := c.current()
	if err != nil {
		if verr := storekit.ValidateAdjustments(adjustments); verr != nil {
			return fmt.Errorf("redisstore: %w", verr)
		}
		return err
	}
	return st.Adjust(ctx, now, adjustments)
}

// Reset implements tokenlimit.Store.
func (c *redisConn) Reset(ctx context.Context, key string, alg tokenlimit.Algorithm) error {
	st, err := c.current()
	if err != nil {
		return err
	}
	return st.Reset(ctx, key, alg)
}

// LogEntries implements tokenlimit.LogReader.
func (c *redisConn) LogEntries(ctx context.Context, key string, limit tokenlimit.Limit, now time.Time) ([]tokenlimit.LogEntry, error) {
	st, err := c.current()
	if err != nil {
		return nil, err
	}
	return st.LogEntries(ctx, key, limit, now)
}

// Reserve implements tokenlimit.Reserver.
func (c *redisConn) Reserve(ctx context.Context, now time.Time, req tokenlimit.ReserveRequest, results []tokenlimit.Result) (tokenlimit.ReserveOutcome, error) {
	st, err := c.current()
	if err != nil {
		if verr := storekit.ValidateReserve(req, results); verr != nil {
			return tokenlimit.ReserveOutcome{}, fmt.Errorf("redisstore: %w", verr)
		}
		return tokenlimit.ReserveOutcome{}, err
	}
	return st.Reserve(ctx, now, req, results)
}

// Settle implements tokenlimit.Reserver.
func (c *redisConn) Settle(ctx context.Context, now time.Time, req tokenlimit.SettleRequest) (tokenlimit.SettleStatus, error) {
	st, err := c.current()
	if err != nil {
		if verr := req.Validate(); verr != nil {
			return 0, fmt.Errorf("redisstore: %w", verr)
		}
		return 0, err
	}
	return st.Settle(ctx, now, req)
}
