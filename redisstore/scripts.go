package redisstore

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"strings"

	"github.com/tokenlimit/tokenlimit"
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

// entry is one entry point: the name of its Lua function and the files its
// script needs, in order, the one defining that function last.
type entry struct {
	name  string
	files []string
}

func withAlgorithms(files ...string) []string {
	return append(append([]string(nil), algorithmFiles...), files...)
}

// The entry points.
var (
	checkEntry      = entry{"check", withAlgorithms("check_group.lua", "check.lua")}
	checkBatchEntry = entry{"check_batch", withAlgorithms("check_group.lua", "check_batch.lua")} // batch.go
	adjustEntry     = entry{"adjust", withAlgorithms("adjust_item.lua", "adjust.lua")}
	// reserve and settle keep reservations (tokenlimit.Reserver); claim is
	// the Cluster pointer that finds them by id.
	reserveEntry = entry{"reserve", withAlgorithms("check_group.lua", "adjust_item.lua", "record.lua", "reserve.lua")}
	settleEntry  = entry{"settle", withAlgorithms("adjust_item.lua", "record.lua", "settle.lua")}
	claimEntry   = entry{"claim", withAlgorithms("adjust_item.lua", "record.lua", "claim.lua")}
	// The batches of reservations and of settlements (reserve_batch.go).
	reserveBatchEntry = entry{"reserve_batch", withAlgorithms("check_group.lua", "adjust_item.lua", "record.lua", "reserve.lua", "reserve_batch.lua")}
	settleBatchEntry  = entry{"settle_batch", withAlgorithms("adjust_item.lua", "record.lua", "settle_batch.lua")}
	// entries lists a sliding log's entries in its window (read only).
	entriesEntry = entry{"log_entries", []string{"lib.lua", "sliding_log.lua", "log_entries.lua"}}
	resetEntry   = entry{"reset", []string{"lib.lua", "reset.lua"}}
	// checkOneEntry holds, per algorithm, the check of one item: as a
	// script, only that algorithm's code, so each call builds fewer
	// functions.
	checkOneEntry = [...]entry{
		tokenlimit.FixedWindow:    {"check_one_fixed_window", []string{"lib.lua", "fixed_window.lua", "check_one.lua", "one_fixed_window.lua"}},
		tokenlimit.SlidingLog:     {"check_one_sliding_log", []string{"lib.lua", "sliding_log.lua", "one_sliding_log.lua"}},
		tokenlimit.SlidingCounter: {"check_one_sliding_counter", []string{"lib.lua", "sliding_counter.lua", "check_one.lua", "one_sliding_counter.lua"}},
		tokenlimit.TokenBucket:    {"check_one_bucket", []string{"lib.lua", "bucket.lua", "check_one.lua", "one_bucket.lua"}},
		tokenlimit.GCRA:           {"check_one_bucket", []string{"lib.lua", "bucket.lua", "check_one.lua", "one_bucket.lua"}},
	}
)

// allEntries are the library's entry points (GCRA shares the token
// bucket's).
var allEntries = []entry{
	checkEntry, checkBatchEntry, adjustEntry, reserveEntry, reserveBatchEntry, settleEntry, settleBatchEntry, claimEntry, entriesEntry, resetEntry,
	checkOneEntry[tokenlimit.FixedWindow], checkOneEntry[tokenlimit.SlidingLog],
	checkOneEntry[tokenlimit.SlidingCounter], checkOneEntry[tokenlimit.TokenBucket],
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
// point, named <library>_<entry>.
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
		b.WriteString("redis.register_function('" + name + "_" + e.name + "', " + e.name + ")\n")
	}
	return library{name: name, src: b.String()}
}

// script is one entry point as the store calls it.
type script struct {
	src string // the script: its files and a call of its function
	sha string // SHA1 of src, for EVALSHA
	fn  string // its function in the library, for FCALL
}

func newScript(lib library, e entry) script {
	src := assemble(e.files...) + "return " + e.name + "(KEYS, ARGV)\n"
	sum := sha1.Sum([]byte(src))
	return script{src: src, sha: hex.EncodeToString(sum[:]), fn: lib.name + "_" + e.name}
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
