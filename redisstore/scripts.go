package redisstore

import "embed"

// The Lua sources. Each script is lib.lua, the algorithms and its own main
// part, concatenated, because a Redis script is a single chunk and a check
// of several items runs every algorithm in one call.
//
//go:embed lua/*.lua
var luaFiles embed.FS

var (
	checkSource  = assemble("check.lua")
	adjustSource = assemble("adjust.lua")
	// resetSource deletes a budget's keys (through a script, so that it goes
	// through the same Scripter as everything else).
	resetSource = "redis.call('DEL', unpack(KEYS))\nreturn {}"
)

func assemble(main string) string {
	var src []byte
	for _, name := range []string{"lib.lua", "fixed_window.lua", "sliding_counter.lua", "sliding_log.lua", "bucket.lua", main} {
		part, err := luaFiles.ReadFile("lua/" + name)
		if err != nil {
			panic("redisstore: embedded " + name + " missing: " + err.Error()) // a build defect, caught by every test
		}
		src = append(append(src, part...), '\n')
	}
	return string(src)
}
