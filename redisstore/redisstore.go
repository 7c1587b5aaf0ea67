// Package redisstore is the tokenlimit.Store on Redis (standalone, Sentinel
// or Cluster): every Check and every Adjust is decided atomically by one Lua
// call, whatever the number of items: a Redis Function (FCALL; the library
// is loaded, and reloaded when lost, by the store) where the server and the
// client have them (see FunctionCaller), else a script (EVALSHA,
// transparently reloaded after NOSCRIPT). Checks that arrive together may
// share a call, each still all or nothing (Options.Unbatched). By default
// the decision time is the Redis server's TIME, so gateway replicas with
// skewed clocks agree.
//
// The store speaks to Redis through a Scripter; the subpackages goredisclient
// and rueidisclient adapt the two common Go clients, so a service brings the
// client it already has.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/storekit"
)

// Scripter runs Lua scripts on Redis. Implementations return the script's
// reply as integers and Redis error replies unchanged (IsNoScript must be able
// to recognise NOSCRIPT), and are safe for concurrent use.
type Scripter interface {
	// EvalSHA runs the script cached under sha (EVALSHA).
	EvalSHA(ctx context.Context, sha string, keys, args []string) ([]int64, error)
	// Eval runs the script's source (EVAL), which also caches it.
	Eval(ctx context.Context, src string, keys, args []string) ([]int64, error)
}

// IsNoScript reports whether err is Redis' NOSCRIPT error: the script cache
// lost the script (restart, failover, SCRIPT FLUSH).
func IsNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// Options configures a Store. The zero value is the production setup.
type Options struct {
	// Prefix starts every key. Empty means "rl:".
	Prefix string
	// CallerTime makes the store decide at the now passed to Check and
	// Adjust instead of the Redis server's TIME. For tests that drive a fake
	// clock; in production, server time keeps replicas consistent.
	CallerTime bool
	// Cluster must be set on Redis Cluster. It makes a check whose keys lie
	// in several slots run one script per slot, in order, instead of failing
	// with CROSSSLOT: if a slot's items deny, the slots already charged are
	// refunded, so the check stays all or nothing, but another client may
	// briefly see those charges. Keys that share a hash tag
	// ("{tenant=acme}:...") share a slot and are decided in one atomic call.
	// Adjustments run per slot too. Reservations keep their records in the
	// slots of their items and a pointer in the id's slot (see Reserve);
	// without Cluster they fail on Redis Cluster with CROSSSLOT.
	Cluster bool
	// Unbatched makes every check, reservation and settlement its own
	// call. By default checks that arrive while a check's call is in
	// flight are decided together in the next call, each still all or
	// nothing and in arrival order, which shares one call's cost among
	// them; a lone caller waits for nothing (batch.go). Reservations and
	// settlements are batched alike, except on Cluster (records.go).
	Unbatched bool
	// TTLPadding is added to every key's TTL. Keys always expire as soon as
	// their state is empty; padding only matters when the caller's clock
	// (CallerTime) runs ahead of or behind the server's.
	TTLPadding time.Duration
	// RefundTimeout bounds the calls that take back a partly charged
	// Cluster check or reservation when a later slot denies or fails. They
	// run on a context detached from the caller's, whose deadline may be
	// what failed, so that the earlier slots are not left over-charged.
	// Zero means DefaultRefundTimeout.
	RefundTimeout time.Duration
}

// DefaultRefundTimeout is Options.RefundTimeout's default.
const DefaultRefundTimeout = time.Second

// Store is the Redis store. It is safe for concurrent use.
type Store struct {
	client Scripter
	// fn runs the entry points as Redis Functions; nil when the client
	// cannot (it is not a FunctionCaller), and then EVALSHA runs them.
	fn      *functions
	prefix  string
	caller  bool
	cluster bool
	padMs   string
	// batch queues checks per slot, records the reservations and
	// settlements (not on Cluster); both nil when Options.Unbatched.
	batch    *batchers
	records  *recordLanes
	refundTO time.Duration
	// legacy is set once the server could not compile a script's "#!lua"
	// line (older than Redis 7): scripts run without it from then on.
	legacy atomic.Bool
	// lone holds, per kind of job, the *loneCall a job made in a call of
	// its own is built in (callAlone).
	lone struct{ checks, reserves, settles sync.Pool }
}

// The entry points as the store calls them, and the library that holds
// them all.
var (
	lib          = buildLibrary()
	checkSc      = newScript(lib, checkEntry)
	adjustSc     = newScript(lib, adjustEntry)
	refundSc     = newScript(lib, refundEntry)
	undoSettleSc = newScript(lib, undoSettleEntry)
	resetSc      = newScript(lib, resetEntry)
	entriesSc    = newScript(lib, entriesEntry)
	reserveSc    = newScript(lib, reserveEntry)
	settleSc     = newScript(lib, settleEntry)
	claimSc      = newScript(lib, claimEntry)
)

var (
	_ tokenlimit.Store     = (*Store)(nil)
	_ tokenlimit.Describer = (*Store)(nil)
)

// Describe implements tokenlimit.Describer: "redis", remote.
func (s *Store) Describe() tokenlimit.StoreInfo {
	return tokenlimit.StoreInfo{Name: "redis", Remote: true}
}

// New returns a store that runs its scripts through client.
func New(client Scripter, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: New: client is nil")
	}
	if opts.TTLPadding < 0 {
		return nil, fmt.Errorf("redisstore: New: TTLPadding must not be negative, got %s", opts.TTLPadding)
	}
	if opts.RefundTimeout < 0 {
		return nil, fmt.Errorf("redisstore: New: RefundTimeout must not be negative, got %s", opts.RefundTimeout)
	}
	if opts.RefundTimeout == 0 {
		opts.RefundTimeout = DefaultRefundTimeout
	}
	if strings.ContainsAny(opts.Prefix, "{}") {
		return nil, fmt.Errorf("redisstore: New: Prefix %q must not contain '{' or '}': they would become the keys' Redis Cluster hash tag", opts.Prefix)
	}
	if opts.Prefix == "" {
		opts.Prefix = "rl:"
	}
	s := &Store{
		client:   client,
		prefix:   opts.Prefix,
		caller:   opts.CallerTime,
		cluster:  opts.Cluster,
		padMs:    strconv.FormatInt(opts.TTLPadding.Milliseconds(), 10),
		refundTO: opts.RefundTimeout,
	}
	if fc, ok := client.(FunctionCaller); ok {
		s.fn = &functions{fc: fc, lib: lib}
	}
	if !opts.Unbatched {
		s.batch = newBatchers(opts.Cluster)
		s.records = newRecordLanes(s)
	}
	return s, nil
}

// Check implements tokenlimit.Store in one script call, which it may share
// with other checks (see Options.Unbatched), or, on Redis Cluster with items
// in several slots, in one call per slot (see Options.Cluster).
func (s *Store) Check(ctx context.Context, now time.Time, items []tokenlimit.Item, results []tokenlimit.Result) (time.Time, error) {
	if err := storekit.ValidateItems(items, results); err != nil {
		return now, fmt.Errorf("redisstore: %w", err)
	}
	if err := storekit.ValidateTime("now", now); err != nil {
		return now, fmt.Errorf("redisstore: %w", err)
	}
	if s.cluster {
		if groups := s.slotGroups(items); len(groups) > 1 {
			return s.checkGroups(ctx, now, items, results, groups)
		}
	}
	if s.batch != nil {
		return s.checkBatched(ctx, now, items, results)
	}
	return s.checkOnce(ctx, now, items, results)
}

// checkOnce runs the check script on items, which share a slot on Cluster.
func (s *Store) checkOnce(ctx context.Context, now time.Time, items []tokenlimit.Item, results []tokenlimit.Result) (time.Time, error) {
	return s.checkAt(ctx, now, s.caller, items, results)
}

// checkAt is checkOnce deciding at now when callerTime, else at the
// server's TIME: a call of check.lua with one check, built in pooled
// buffers (callAlone).
func (s *Store) checkAt(ctx context.Context, now time.Time, callerTime bool, items []tokenlimit.Item, results []tokenlimit.Result) (time.Time, error) {
	done, err := callAlone(ctx, &s.lone.checks, checkJob{queuedCall: queuedCall{ctx: ctx, now: now}, items: items, results: results, callerTime: callerTime}, s.checkMany)
	if err != nil {
		return now, err
	}
	return done.at, nil
}

// Adjust implements tokenlimit.Store in one script call.
func (s *Store) Adjust(ctx context.Context, now time.Time, adjustments []tokenlimit.Adjustment) error {
	if err := storekit.ValidateAdjustments(adjustments); err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	if err := storekit.ValidateTime("now", now); err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	if len(adjustments) == 0 {
		return nil
	}
	if s.cluster {
		return s.adjustBySlot(ctx, now, adjustments)
	}
	return s.adjustOnce(ctx, now, adjustments, adjustSc)
}

// adjustOnce runs sc, the adjust script or the refund script (refunds
// only), on adjustments that share a slot.
func (s *Store) adjustOnce(ctx context.Context, now time.Time, adjustments []tokenlimit.Adjustment, sc script) error {
	keys, args := make([]string, 0, len(adjustments)+1), s.header(now, 6*len(adjustments))
	for _, a := range adjustments {
		keys = s.appendKeys(keys, a.Key, a.Limit.Algorithm)
		args = appendParams(args, a.Limit, a.Delta)
		args = append(args, strconv.FormatInt(a.ChargedAt.UnixMicro(), 10))
	}
	if _, err := s.run(ctx, sc, keys, args); err != nil {
		return fmt.Errorf("redisstore: adjust: %w", err)
	}
	return nil
}

// Reset implements tokenlimit.Store: it deletes the budget's keys.
func (s *Store) Reset(ctx context.Context, key string, alg tokenlimit.Algorithm) error {
	if err := storekit.ValidateKey(key, alg); err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	if _, err := s.run(ctx, resetSc, s.appendKeys(nil, key, alg), nil); err != nil {
		return fmt.Errorf("redisstore: reset: %w", err)
	}
	return nil
}

var _ tokenlimit.LogReader = (*Store)(nil)

// LogEntries implements tokenlimit.LogReader with one read-only script call.
func (s *Store) LogEntries(ctx context.Context, key string, limit tokenlimit.Limit, now time.Time) ([]tokenlimit.LogEntry, error) {
	if err := storekit.ValidateItem(tokenlimit.Item{Key: key, Limit: limit}); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	if limit.Algorithm != tokenlimit.SlidingLog {
		return nil, fmt.Errorf("redisstore: %s has no log: %w", limit.Algorithm, tokenlimit.ErrInvalid)
	}
	if err := storekit.ValidateTime("now", now); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	args := append(s.header(now, 1), strconv.FormatInt(limit.Period.Microseconds(), 10))
	reply, err := s.run(ctx, entriesSc, s.appendKeys(nil, key, limit.Algorithm), args)
	if err != nil {
		return nil, fmt.Errorf("redisstore: log entries: %w", err)
	}
	var out []tokenlimit.LogEntry
	for i := 0; i+1 < len(reply); i += 2 {
		out = append(out, tokenlimit.LogEntry{At: time.UnixMicro(reply[i]), Cost: reply[i+1]})
	}
	return out, nil
}

// header starts a script's ARGV: the caller's time or "" for server time,
// and the TTL padding.
func (s *Store) header(now time.Time, more int) []string {
	args := make([]string, 2, 2+more)
	if s.caller {
		args[0] = strconv.FormatInt(now.UnixMicro(), 10)
	}
	args[1] = s.padMs
	return args
}

// appendParams adds an item's algorithm, parameters and cost (or delta) as
// decimal arguments (adjust.lua's form; checks pack theirs, params.go).
func appendParams(args []string, l tokenlimit.Limit, cost int64) []string {
	p1, p2, p3 := limitParams(l)
	return append(args, strconv.Itoa(int(l.Algorithm)), strconv.FormatInt(p1, 10),
		strconv.FormatInt(p2, 10), strconv.FormatInt(p3, 10), strconv.FormatInt(cost, 10))
}

// readResults decodes the results of items from reply[r:] (put_result's
// form, lib.lua) into results and returns the index after them, or an error
// if reply ends first.
func readResults(items []tokenlimit.Item, results []tokenlimit.Result, reply []int64, r int) (int, error) {
	for i, it := range items {
		if r+1 >= len(reply) {
			return r, errShortReply
		}
		res := tokenlimit.Result{Allowed: true, Limit: it.Limit.Capacity(), Remaining: -reply[r]}
		if f := reply[r]; f > 0 {
			if r+3 >= len(reply) {
				return r, errShortReply
			}
			res = tokenlimit.Result{
				Allowed:          (f-1)&1 != 0,
				CostExceedsLimit: (f-1)&2 != 0,
				Limit:            res.Limit,
				Remaining:        reply[r+1],
				RetryAfter:       time.Duration(reply[r+2]) * time.Microsecond,
			}
			r += 2
		}
		res.ResetAfter = time.Duration(reply[r+1]) * time.Microsecond
		results[i] = res
		r += 2
	}
	return r, nil
}

// errShortReply is readResults' error for a reply that ends too soon.
var errShortReply = errors.New("reply ends before its results")

// run calls an entry point: as a Redis Function when the store can (see
// FunctionCaller), else the script by SHA and, if Redis lost it, by source,
// which reloads it. One round trip normally; after a restart, SCRIPT FLUSH
// or FUNCTION FLUSH, one more to reload and the call again. A Redis that
// refused the call for want of memory answers an error matching
// tokenlimit.ErrStoreFull (see storeFull).
func (s *Store) run(ctx context.Context, sc script, keys, args []string) ([]int64, error) {
	if s.fn != nil && !s.fn.off.Load() {
		if reply, ran, err := s.fn.call(ctx, sc, keys, args); ran {
			return reply, replyError(err)
		}
	}
	reply, err := s.eval(ctx, sc, keys, args)
	return reply, replyError(err)
}

// eval runs sc as a script: by SHA, then by source if Redis lost it, and
// without its "#!lua" line on a server that cannot compile it.
func (s *Store) eval(ctx context.Context, sc script, keys, args []string) ([]int64, error) {
	if s.legacy.Load() {
		reply, err := s.client.EvalSHA(ctx, sc.legacySHA, keys, args)
		if IsNoScript(err) {
			reply, err = s.client.Eval(ctx, sc.legacy, keys, args)
		}
		return reply, err
	}
	reply, err := s.client.EvalSHA(ctx, sc.sha, keys, args)
	if IsNoScript(err) {
		reply, err = s.client.Eval(ctx, sc.src, keys, args)
		if isShebangRefused(err) { // compiling failed: nothing ran
			s.legacy.Store(true)
			return s.eval(ctx, sc, keys, args)
		}
	}
	return reply, err
}

// isShebangRefused reports whether err is a server older than Redis 7
// failing to compile a script's "#!lua" line (Lua 5.1 reads '#' as an
// unexpected symbol on line 1).
func isShebangRefused(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Error compiling script") && strings.Contains(err.Error(), ":1: unexpected symbol near '#'")
}

// replyError maps Redis' error replies to what the store's callers act on.
func replyError(err error) error {
	return storeFull(crossSlotHint(err))
}

// storeFull makes Redis' refusal of a call for want of memory
// (maxmemory reached under the noeviction policy: "OOM command not allowed
// when used memory > 'maxmemory'") match tokenlimit.ErrStoreFull, the
// answer of a full embedded store, rather than a failing store's. Every
// entry point that writes declares so (see flags), so a full Redis refuses
// the call before it writes anything.
func storeFull(err error) error {
	if err != nil && (strings.HasPrefix(err.Error(), "OOM ") || strings.Contains(err.Error(), "OOM command not allowed")) {
		return fmt.Errorf("%w: redis is at its maxmemory and evicts nothing (maxmemory-policy noeviction): %w", tokenlimit.ErrStoreFull, err)
	}
	return err
}

// crossSlotHint says what to do about a CROSSSLOT error.
func crossSlotHint(err error) error {
	if err != nil && strings.HasPrefix(err.Error(), "CROSSSLOT") {
		return fmt.Errorf("%w: on Redis Cluster set Options.Cluster, or give the keys of one check a shared hash tag, such as {tenant=acme}", err)
	}
	return err
}

// runIdempotent is run for the scripts that are safe to repeat (reserve and
// settle, bound to an id): after an error of the connection itself, such as
// a stale connection that Redis closed when it restarted, it tries once
// more. Plain checks are never retried: a check whose reply was lost may
// have charged, and a second one would charge again.
func (s *Store) runIdempotent(ctx context.Context, sc script, keys, args []string) ([]int64, error) {
	reply, err := s.run(ctx, sc, keys, args)
	if err != nil && isConnectionError(err) && ctx.Err() == nil {
		reply, err = s.run(ctx, sc, keys, args)
	}
	return reply, err
}

// isConnectionError reports whether err says the connection broke (closed,
// reset), as opposed to a Redis error reply or a timeout.
func isConnectionError(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED)
}

// detached returns a context for undoing a partial Cluster call: it keeps
// ctx's values but not its deadline or cancellation, and has the store's
// refund timeout.
func (s *Store) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.refundTO)
}
