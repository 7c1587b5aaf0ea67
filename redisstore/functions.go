package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
)

// FunctionCaller is a Scripter that also runs Redis Functions (Redis 7 and
// later); both adapters implement it. A store whose client does runs its
// code as one library of functions, loaded once (FUNCTION LOAD) and called
// by name (FCALL), which saves every call building the script's functions.
// When the library is missing (FUNCTION FLUSH, a restart without
// persistence, a new Cluster node) the store loads it and calls again: a
// call that found no function decided nothing, so nothing is lost or
// charged twice. When the server has no FUNCTION or FCALL (Redis 6, or an
// ACL that denies them) the store uses EVALSHA for good. To use EVALSHA
// only, pass a Scripter that does not implement FunctionCaller.
type FunctionCaller interface {
	Scripter
	// FCall runs a function (FCALL) and returns its reply as integers, and
	// Redis error replies unchanged (such as "ERR Function not found").
	FCall(ctx context.Context, function string, keys, args []string) ([]int64, error)
	// FunctionLoad loads a library (FUNCTION LOAD) wherever FCall may run
	// its functions: on Redis Cluster, on every master. A library of the
	// same name that is already there counts as loaded. An adapter whose
	// client cannot load functions returns ErrNoFunctions.
	FunctionLoad(ctx context.Context, src string) error
}

// ErrNoFunctions is what a FunctionCaller returns when its client cannot
// run Redis Functions; the store then uses EVALSHA.
var ErrNoFunctions = errors.New("redisstore: the client cannot run Redis Functions")

// functions runs the store's entry points as functions of one library.
type functions struct {
	fc  FunctionCaller
	lib library
	// off is set once the server turned out to have no usable FUNCTION:
	// the store uses EVALSHA from then on.
	off atomic.Bool
	// loads counts the library loads made; mu serialises them, so that
	// callers that all found the library missing load it once.
	mu    sync.Mutex
	loads atomic.Uint64
}

// call runs sc's function. ran is false when the function did not run (the
// library is missing and could not be loaded, or the server has no
// FUNCTION): nothing was decided, and the caller runs the script instead.
func (f *functions) call(ctx context.Context, sc script, keys, args []string) (reply []int64, ran bool, err error) {
	gen := f.loads.Load()
	reply, err = f.fc.FCall(ctx, sc.fn, keys, args)
	switch {
	case isFunctionMissing(err):
		if f.load(ctx, gen) != nil {
			return nil, false, nil
		}
		reply, err = f.fc.FCall(ctx, sc.fn, keys, args)
		if isFunctionMissing(err) || isNoFunctions(err) { // flushed again, or a node the load missed
			return nil, false, nil
		}
	case isNoFunctions(err):
		f.off.Store(true)
		return nil, false, nil
	}
	return reply, true, err
}

// load loads the library unless a load completed since generation gen
// (the one the caller's failed call saw).
func (f *functions) load(ctx context.Context, gen uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.loads.Load() != gen {
		return nil
	}
	if err := f.fc.FunctionLoad(ctx, f.lib.src); err != nil && !IsLibraryLoaded(err) {
		if isNoFunctions(err) {
			f.off.Store(true)
		}
		return err
	}
	f.loads.Add(1)
	return nil
}

// isFunctionMissing reports whether err is Redis' answer to an FCALL of a
// function it does not have: the function did not run.
func isFunctionMissing(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Function not found")
}

// IsLibraryLoaded reports whether err is FUNCTION LOAD's answer for a
// library that is already loaded ("ERR Library '...' already exists"),
// which adapters loading on several nodes count as success.
func IsLibraryLoaded(err error) bool {
	return err != nil && strings.Contains(err.Error(), "already exists")
}

// isNoFunctions reports whether err says the server, the user's ACL or the
// client cannot run functions at all.
func isNoFunctions(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrNoFunctions) {
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.HasPrefix(msg, "err unknown command") || strings.HasPrefix(msg, "err unknown subcommand") ||
		strings.HasPrefix(msg, "noperm") && (strings.Contains(msg, "'fcall'") || strings.Contains(msg, "'function"))
}
