// Package redisplane is the quota plane's Store on Redis (standalone,
// Sentinel or Cluster): every record in one hash, its version in another,
// the sequence of writes in a counter and a stream, all under one hash tag
// so that each write is one atomic script on one node. Replicas follow the
// stream with a blocking XREAD: a write anywhere reaches every replica's
// cache as soon as Redis has it, and decisions read the cache, never Redis.
package redisplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/tokenlimit/tokenlimit/plane"
)

// Options configures a Store.
type Options struct {
	// Prefix is the hash tag of every key: "{<Prefix>}:records" and so on.
	// Empty means "tl:plane".
	Prefix string
	// LogLength is about how many writes the stream keeps for replicas
	// that fall behind (a replica further behind reloads every record).
	// Zero means 100,000.
	LogLength int
	// Block is how long one XREAD waits for writes; after an empty one
	// the store checks that Redis has not lost its records. Zero means 1 s.
	Block time.Duration
	// SettleTimeout bounds how long a write whose reply was lost waits for
	// Redis to tell whether it was applied. Zero means 2 s.
	SettleTimeout time.Duration
}

// Store is the plane's Store on Redis. Safe for concurrent use.
type Store struct {
	client func() (rueidis.Client, error)
	// the keys, all in the hash tag's slot
	records, versions, seq, log string
	logLength                   string
	block                       time.Duration
	// tokens prefixes the keys of the writes' tokens; keep is how long a
	// token's outcome or fence stays, in ms.
	tokens, keep  string
	settleTimeout time.Duration
}

var _ plane.Store = (*Store)(nil)

// New returns the store on the client that client returns (an error while
// there is none yet: Redis not reached).
func New(client func() (rueidis.Client, error), opts Options) *Store {
	if opts.Prefix == "" {
		opts.Prefix = "tl:plane"
	}
	if opts.LogLength == 0 {
		opts.LogLength = 100_000
	}
	if opts.Block == 0 {
		opts.Block = time.Second
	}
	if opts.SettleTimeout == 0 {
		opts.SettleTimeout = 2 * time.Second
	}
	tag := "{" + opts.Prefix + "}:"
	return &Store{client: client, records: tag + "records", versions: tag + "versions", seq: tag + "seq", log: tag + "log",
		logLength: strconv.Itoa(opts.LogLength), block: opts.Block,
		tokens: tag + "write:", keep: strconv.FormatInt(tokenLife.Milliseconds(), 10), settleTimeout: opts.SettleTimeout}
}

// tokenLife is how long Redis keeps a write's outcome, or the fence that
// refuses it: longer than any write stays on its way to Redis.
const tokenLife = 10 * time.Minute

// settleRetry is how long settle waits before asking Redis again.
const settleRetry = 20 * time.Millisecond

func field(kind plane.Kind, id string) string { return string(kind) + "/" + id }

func parseField(f string) (plane.Kind, string) {
	kind, id, _ := strings.Cut(f, "/")
	return plane.Kind(kind), id
}

// writeScript writes (or, with ARGV[4] = 1, deletes) one record if its
// version is the one expected, and appends the write to the stream:
// {1, version}, {0, stored version} for a conflict, {-1, 0} to delete a
// record that is absent. It keeps that outcome as "code:value" under the
// write's token, KEYS[5], for ARGV[6] ms, and returns {-2, 0} without
// doing anything when the token is taken: fenceScript fenced it.
var writeScript = rueidis.NewLuaScript(`
if redis.call('EXISTS', KEYS[5]) == 1 then return {-2, 0} end
local function outcome(code, value)
  redis.call('SET', KEYS[5], code .. ':' .. value, 'PX', ARGV[6])
  return {code, value}
end
local cur = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
local want = tonumber(ARGV[2])
local del = ARGV[4] == '1'
if del and cur == 0 then return outcome(-1, 0) end
if want >= 0 and cur ~= want then return outcome(0, cur) end
local v = redis.call('INCR', KEYS[3])
if del then
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  redis.call('HSET', KEYS[2], ARGV[1], v)
end
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[5], v .. '-0', 'f', ARGV[1], 'd', ARGV[3])
return outcome(1, v)
`)

// fenceScript answers the outcome writeScript kept under the token
// KEYS[1], or, when there is none, takes the token for ARGV[1] ms so that
// the write, should it still arrive, does nothing, and answers "fenced".
var fenceScript = rueidis.NewLuaScript(`
local o = redis.call('GET', KEYS[1])
if o then return o end
redis.call('SET', KEYS[1], 'fenced', 'PX', ARGV[1])
return 'fenced'
`)

// loadScript returns {seq, records as field/value pairs, versions as
// field/value pairs}, one consistent snapshot.
var loadScript = rueidis.NewLuaScript(`
return {redis.call('GET', KEYS[3]) or '0', redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2])}
`)

func (s *Store) keys() []string { return []string{s.records, s.versions, s.seq, s.log} }

// Put implements plane.Store.
func (s *Store) Put(ctx context.Context, kind plane.Kind, id string, ifVersion int64, data []byte) (int64, error) {
	return s.write(ctx, kind, id, ifVersion, string(data), false)
}

// Delete implements plane.Store.
func (s *Store) Delete(ctx context.Context, kind plane.Kind, id string, ifVersion int64) (int64, error) {
	return s.write(ctx, kind, id, ifVersion, "", true)
}

func (s *Store) write(ctx context.Context, kind plane.Kind, id string, ifVersion int64, data string, del bool) (int64, error) {
	c, err := s.client()
	if err != nil {
		return 0, fmt.Errorf("redisplane: %w", err)
	}
	flag := "0"
	if del {
		flag = "1"
	}
	token := s.token()
	keys := append(s.keys(), token)
	res, err := writeScript.Exec(ctx, c, keys, []string{field(kind, id), strconv.FormatInt(ifVersion, 10), data, flag, s.logLength, s.keep}).AsIntSlice()
	if err == nil && len(res) == 2 {
		return outcome(res[0], res[1])
	}
	if err == nil {
		err = fmt.Errorf("an unreadable answer %v", res)
	}
	failed := fmt.Errorf("redisplane: writing %s %s: %w", kind, id, err)
	if _, answered := rueidis.IsRedisErr(err); answered || neverSent(err) {
		// Redis refused the script, or never got it: it did not run.
		return 0, failed
	}
	// The reply was lost (or unreadable): the write may have run, or may
	// still run.
	return s.settle(ctx, c, token, failed)
}

// neverSent reports whether err says that the command found no
// connection to go out on: dialing Redis failed.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// outcome turns the write script's answer into Put's and Delete's.
func outcome(code, value int64) (int64, error) {
	switch code {
	case 1:
		return value, nil
	case 0:
		return 0, plane.ErrConflict
	case -1:
		return 0, plane.ErrNotFound
	}
	return 0, errors.New("redisplane: the write's token was fenced before the write ran")
}

// token returns a new write token's key, in the records' slot.
func (s *Store) token() string {
	var b [16]byte
	rand.Read(b[:])
	return s.tokens + hex.EncodeToString(b[:])
}

// settle tells what became of the write whose reply was lost (failed):
// it reads the outcome the write kept under token, or fences the token so
// that a write still on its way does nothing, asking again every
// settleRetry (a connection that broke takes a moment to be replaced)
// until its own deadline. The write's outcome, failed when it surely did
// not run, or failed marked plane.ErrOutcomeUnknown when Redis could not
// be asked.
func (s *Store) settle(ctx context.Context, c rueidis.Client, token string, failed error) (int64, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.settleTimeout)
	defer cancel()
	var o string
	for {
		var err error
		if o, err = fenceScript.Exec(ctx, c, []string{token}, []string{s.keep}).ToString(); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w (%w; asking Redis whether it was applied: %v)", plane.ErrOutcomeUnknown, failed, err)
		case <-time.After(settleRetry):
		}
	}
	if o == "fenced" {
		return 0, fmt.Errorf("%w; it was not applied", failed)
	}
	codeText, valueText, _ := strings.Cut(o, ":")
	code, err1 := strconv.ParseInt(codeText, 10, 64)
	value, err2 := strconv.ParseInt(valueText, 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("%w (%w; the outcome Redis kept, %q, is unreadable: %v)", plane.ErrOutcomeUnknown, failed, o, err)
	}
	return outcome(code, value)
}

// Load implements plane.Store.
func (s *Store) Load(ctx context.Context) ([]plane.Record, int64, error) {
	c, err := s.client()
	if err != nil {
		return nil, 0, fmt.Errorf("redisplane: %w", err)
	}
	parts, err := loadScript.Exec(ctx, c, s.keys(), nil).ToArray()
	if err != nil || len(parts) != 3 {
		return nil, 0, fmt.Errorf("redisplane: loading: %w", err)
	}
	seqText, err1 := parts[0].ToString()
	data, err2 := parts[1].AsStrMap()
	versions, err3 := parts[2].AsStrMap()
	seq, err4 := strconv.ParseInt(seqText, 10, 64)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, 0, fmt.Errorf("redisplane: loading: %w", err)
	}
	out := make([]plane.Record, 0, len(data))
	for f, d := range data {
		kind, id := parseField(f)
		v, _ := strconv.ParseInt(versions[f], 10, 64)
		out = append(out, plane.Record{Kind: kind, ID: id, Version: v, Data: []byte(d)})
	}
	return out, seq, nil
}

// Watch implements plane.Store: it follows the stream of writes with a
// blocking XREAD, and reloads every record when it finds a gap (the
// stream was trimmed past seq) or a sequence behind its own (Redis lost
// its data).
func (s *Store) Watch(ctx context.Context, seq int64, apply func([]plane.Record, bool)) (int64, error) {
	for ctx.Err() == nil {
		c, err := s.client()
		if err != nil {
			return seq, fmt.Errorf("redisplane: %w", err)
		}
		entries, err := s.read(ctx, c, seq)
		if ctx.Err() != nil {
			return seq, nil
		}
		if err != nil {
			return seq, err
		}
		if len(entries) == 0 {
			if seq, err = s.checkSeq(ctx, c, seq, apply); err != nil {
				return seq, err
			}
			continue
		}
		recs, last, gap := records(entries, seq)
		if gap {
			if seq, err = s.reload(ctx, seq, apply); err != nil {
				return seq, err
			}
			continue
		}
		apply(recs, false)
		seq = last
	}
	return seq, nil
}

func (s *Store) read(ctx context.Context, c rueidis.Client, seq int64) ([]rueidis.XRangeEntry, error) {
	cmd := c.B().Xread().Count(1000).Block(s.block.Milliseconds()).Streams().Key(s.log).Id(strconv.FormatInt(seq, 10) + "-0").Build()
	streams, err := c.Do(ctx, cmd).AsXRead()
	if rueidis.IsRedisNil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("redisplane: following the writes: %w", err)
	}
	return streams[s.log], nil
}

// records turns stream entries into records; gap reports that the first
// is not the write after seq.
func records(entries []rueidis.XRangeEntry, seq int64) (recs []plane.Record, last int64, gap bool) {
	for i, e := range entries {
		ms, _, _ := strings.Cut(e.ID, "-")
		v, err := strconv.ParseInt(ms, 10, 64)
		if err != nil || (i == 0 && v != seq+1) {
			return nil, 0, true
		}
		kind, id := parseField(e.FieldValues["f"])
		r := plane.Record{Kind: kind, ID: id, Version: v}
		if d := e.FieldValues["d"]; d != "" {
			r.Data = []byte(d)
		}
		recs, last = append(recs, r), v
	}
	return recs, last, false
}

// checkSeq reloads when Redis' sequence is behind seq: it lost the
// records (a restart without persistence, a flush).
func (s *Store) checkSeq(ctx context.Context, c rueidis.Client, seq int64, apply func([]plane.Record, bool)) (int64, error) {
	stored, err := c.Do(ctx, c.B().Get().Key(s.seq).Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		stored, err = 0, nil
	}
	if err != nil {
		return seq, fmt.Errorf("redisplane: %w", err)
	}
	if stored >= seq {
		return seq, nil
	}
	return s.reload(ctx, seq, apply)
}

// reload applies every record; on an error it returns seq unchanged.
func (s *Store) reload(ctx context.Context, seq int64, apply func([]plane.Record, bool)) (int64, error) {
	recs, loaded, err := s.Load(ctx)
	if err != nil {
		return seq, err
	}
	apply(recs, true)
	return loaded, nil
}
