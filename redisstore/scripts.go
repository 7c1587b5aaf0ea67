package redisstore

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"strings"
)

// The Lua sources. Every entry point is a Lua function of (keys, argv)
// defined by the last of its files. It runs in one of two forms:
//
//   - as a Redis Function: one library holds every file once and registers
//     every entry point (FUNCTION LOAD once, then FCALL), so a call builds
//     none of the library's functions;
//   - as a script (EVALSHA, the fallback where FUNCTION is missing): the
//     entry point's files, concatenated, then a call of its function with
//     KEYS and ARGV, because a Redis script is a single chunk.
//
//go:embed lua/*.lua
var luaFiles embed.FS

// The algorithms' files, which most entry points need.
var algorithmFiles = []string{"lib.lua", "fixed_window.lua", "sliding_counter.lua", "sliding_log.lua", "bucket.lua"}

// entry is one entry point: the name it is registered under, the files its
// script needs, in order, the one defining its Lua function last, that
// function's name when it is not name, and its flags.
type entry struct {
	name  string
	files []string
	fn    string // the Lua function; "" means name
	flags flags
}

// function is the Lua function that e runs.
func (e entry) function() string {
	if e.fn != "" {
		return e.fn
	}
	return e.name
}

// flags are the Redis 7 flags an entry point declares, as a Redis Function
// (register_function's flags) and as a script (the "#!lua flags=" line).
// What they do on a full Redis (maxmemory reached, noeviction), checked on
// redis-server 7.0.15 (TestFullRedis*):
//
//   - writes (no flags declared, the default for a function and for a
//     script with a "#!lua" line): Redis refuses the whole call before it
//     runs, with "OOM command not allowed when used memory > 'maxmemory'",
//     so a refused decision wrote nothing, however many keys it spans.
//   - allowOOM: runs on a full Redis. Only for entry points that free
//     memory or put back what a call just took (reset, refund, undo), so
//     that undoing a partial Cluster decision works on a full node.
//   - noWrites: reads only; runs on a full Redis (and may run on a replica).
//
// A script without a "#!lua" line (Redis 6, and Redis 7 for compatibility)
// declares nothing: it runs on a full Redis and its first write of a kind
// that grows memory fails (the call's error) unless an earlier command of
// the call already wrote, after which every write succeeds. Our entry
// points' charges are all or nothing even then, but whether a full Redis
// refuses a decision would depend on the order of its commands; declared
// flags make it refuse every decision up front.
type flags int

const (
	writes flags = iota
	allowOOM
	noWrites
)

// names is the flags' list as FUNCTION LOAD and the "#!lua" line spell it.
func (f flags) names() []string {
	switch f {
	case allowOOM:
		return []string{"allow-oom"}
	case noWrites:
		return []string{"no-writes"}
	}
	return nil
}

func withAlgorithms(files ...string) []string {
	return append(append([]string(nil), algorithmFiles...), files...)
}

// The entry points.
var (
	// checkEntry decides every check: a lone one is a call of one.
	checkEntry  = entry{name: "check", files: withAlgorithms("check_group.lua", "check.lua")}
	adjustEntry = entry{name: "adjust", files: withAlgorithms("adjust_item.lua", "adjust.lua")}
	// refundEntry is adjust for refunds only (every delta negative), which
	// Cluster calls make to take back a partial decision. It may run on a
	// full Redis: a refund lowers or deletes what it finds and never makes a
	// key (a sliding log's refund adds one entry, tens of bytes), so the
	// slots charged before a full one are put back.
	refundEntry = entry{name: "refund", fn: "adjust", files: adjustEntry.files, flags: allowOOM}
	// reserve and settle keep reservations (tokenlimit.Reserver), a lone
	// one as a call of one (records.go); claim is the Cluster pointer that
	// finds them by id.
	reserveEntry = entry{name: "reserve", files: withAlgorithms("check_group.lua", "adjust_item.lua", "record.lua", "reserve.lua")}
	settleEntry  = entry{name: "settle", files: withAlgorithms("adjust_item.lua", "record.lua", "settle.lua")}
	// undoSettleEntry is settle for cancelling the records a partial
	// Cluster reservation just wrote (it refunds and deletes them), on a
	// full Redis too (see refundEntry).
	undoSettleEntry = entry{name: "undo_settle", fn: "settle", files: settleEntry.files, flags: allowOOM}
	claimEntry      = entry{name: "claim", files: withAlgorithms("adjust_item.lua", "record.lua", "claim.lua")}
	// entries lists a sliding log's entries in its window (read only).
	entriesEntry = entry{name: "log_entries", files: []string{"lib.lua", "sliding_log.lua", "log_entries.lua"}, flags: noWrites}
	// resetEntry only deletes, which a full Redis allows.
	resetEntry = entry{name: "reset", files: []string{"lib.lua", "reset.lua"}, flags: allowOOM}
)

// allEntries are the library's entry points.
var allEntries = []entry{
	checkEntry, adjustEntry, refundEntry, reserveEntry, settleEntry, undoSettleEntry, claimEntry, entriesEntry, resetEntry,
}

// library is the Redis Functions library of every entry point: its name,
// which carries a hash of its code so that stores of different versions
// sharing a Redis each find their own, and its FUNCTION LOAD source.
type library struct {
	name string
	src  string
}

// buildLibrary assembles the library: every file once, in an order where
// each comes after what it uses, then one register_function per entry
// point, named <library>_<entry>, with the entry's flags.
func buildLibrary() library {
	var files []string
	seen := map[string]bool{}
	for _, e := range allEntries {
		for _, f := range e.files {
			if !seen[f] {
				seen[f] = true
				files = append(files, f)
			}
		}
	}
	body := assemble(files...)
	sum := sha1.Sum([]byte(body))
	name := "tokenlimit_" + hex.EncodeToString(sum[:8])
	var b strings.Builder
	b.WriteString("#!lua name=" + name + "\n" + body)
	for _, e := range allEntries {
		b.WriteString("redis.register_function{function_name='" + name + "_" + e.name + "', callback=" + e.function() +
			", flags={" + quoted(e.flags.names()) + "}}\n")
	}
	return library{name: name, src: b.String()}
}

func quoted(names []string) string {
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("'" + n + "'")
	}
	return b.String()
}

// script is one entry point as the store calls it.
type script struct {
	src string // the script: its flags' "#!lua" line, its files and a call of its function
	sha string // SHA1 of src, for EVALSHA
	fn  string // its function in the library, for FCALL
	// legacy and legacySHA are the script without its "#!lua" line, for a
	// server older than Redis 7, which cannot compile that line.
	legacy, legacySHA string
}

func newScript(lib library, e entry) script {
	legacy := assemble(e.files...) + "return " + e.function() + "(KEYS, ARGV)\n"
	src := "#!lua"
	if names := e.flags.names(); len(names) > 0 {
		src += " flags=" + strings.Join(names, ",")
	}
	src += "\n" + legacy
	return script{src: src, sha: sha1Hex(src), fn: lib.name + "_" + e.name, legacy: legacy, legacySHA: sha1Hex(legacy)}
}

func sha1Hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

func assemble(files ...string) string {
	var src []byte
	for _, name := range files {
		part, err := luaFiles.ReadFile("lua/" + name)
		if err != nil {
			panic("redisstore: embedded " + name + " missing: " + err.Error()) // a build defect, caught by every test
		}
		src = append(append(src, part...), '\n')
	}
	return string(src)
}
