package redisstore

import (
	"embed"

	"github.com/tokenlimit/tokenlimit"
)

// The Lua sources. Each script is lib.lua, the algorithms it needs and its
// own main part, concatenated, because a Redis script is a single chunk: a
// check of several items runs every algorithm in one call.
//
//go:embed lua/*.lua
var luaFiles embed.FS

var (
	checkSource = assemble("lib.lua", "fixed_window.lua", "sliding_counter.lua", "sliding_log.lua", "bucket.lua", "check_group.lua", "check.lua")
	// checkBatchSource decides several checks in one call (batch.go).
	checkBatchSource = assemble("lib.lua", "fixed_window.lua", "sliding_counter.lua", "sliding_log.lua", "bucket.lua", "check_group.lua", "check_batch.lua")
	adjustSource     = assemble(allAlgorithms("adjust_item.lua", "adjust.lua")...)
	// reserveSource and settleSource keep reservations (tokenlimit.Reserver);
	// claimSource is the Cluster pointer that finds them by id.
	reserveSource = assemble(allAlgorithms("check_group.lua", "adjust_item.lua", "record.lua", "reserve.lua")...)
	settleSource  = assemble(allAlgorithms("adjust_item.lua", "record.lua", "settle.lua")...)
	claimSource   = assemble(allAlgorithms("adjust_item.lua", "record.lua", "claim.lua")...)
	// entriesSource lists a sliding log's entries in its window (read only).
	entriesSource = assemble("lib.lua", "sliding_log.lua", "log_entries.lua")
	// checkOneSource holds, per algorithm, the script for a check of one
	// item: only that algorithm's code, so each call builds fewer functions.
	checkOneSource = [...]string{
		tokenlimit.FixedWindow:    assemble("lib.lua", "fixed_window.lua", "one_fixed_window.lua", "check_one.lua"),
		tokenlimit.SlidingLog:     assemble("lib.lua", "sliding_log.lua", "one_sliding_log.lua", "check_one.lua"),
		tokenlimit.SlidingCounter: assemble("lib.lua", "sliding_counter.lua", "one_sliding_counter.lua", "check_one.lua"),
		tokenlimit.TokenBucket:    assemble("lib.lua", "bucket.lua", "one_bucket.lua", "check_one.lua"),
		tokenlimit.GCRA:           assemble("lib.lua", "bucket.lua", "one_bucket.lua", "check_one.lua"),
	}
	// resetSource deletes a budget's keys (through a script, so that it goes
	// through the same Scripter as everything else).
	resetSource = "redis.call('DEL', unpack(KEYS))\nreturn {}"
)

// allAlgorithms lists lib.lua, every algorithm and then the files of a
// script that handles items of any algorithm.
func allAlgorithms(main ...string) []string {
	return append([]string{"lib.lua", "fixed_window.lua", "sliding_counter.lua", "sliding_log.lua", "bucket.lua"}, main...)
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
