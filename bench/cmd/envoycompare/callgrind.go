package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenlimit/tokenlimit/bench/internal/redisserver"
)

// With -callgrind N, envoycompare counts instead of timing: tokenlimit
// serve runs under valgrind's callgrind (with asynchronous preemption off,
// which valgrind's signal handling needs, RDTSCP unused, which valgrind
// does not decode, and the collector off), the load
// generator makes every user's call once and 2,000 more to warm up,
// callgrind_control zeroes the counters, N calls follow, and
// callgrind_control dumps them. The dump's total over N is the service's
// instructions per decision, all its threads counted: gRPC, the Redis
// client and the runtime. The collector is off because whether one of its
// cycles falls within the N calls would move the count by some 3% (what
// allocations cost it, the comparison's allocations per decision show).
// Unlike CPU time, the count hardly moves with the machine's load, so that
// changes worth a few percent show. envoyproxy/ratelimit is not run.
// valgrind and callgrind_control must be on the PATH.

// callgrindWarmup is how many calls beyond one per user warm the service up.
const callgrindWarmup = 2000

// callgrindStoreTimeout is the least store timeout under valgrind, which
// runs the service some 50 times slower.
const callgrindStoreTimeout = 10 * time.Second

func runCallgrind(o options, sc scenario, bin, tmp string) error {
	redis, err := redisserver.Start(o.redisServer)
	if err != nil {
		return err
	}
	defer redis.Stop()
	dir := filepath.Join(tmp, sc.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	out := filepath.Join(dir, "callgrind.out")
	o.storeTimeout = max(o.storeTimeout, callgrindStoreTimeout)
	s, err := startOurs(o, sc, bin, dir, redis.Addr(), "env", "GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off", "GOGC=off",
		"valgrind", "--tool=callgrind", "--callgrind-out-file="+out, "--log-file="+filepath.Join(dir, "valgrind.log"))
	if err != nil {
		return err
	}
	defer s.stop()
	client, err := dialRLSClient(s.grpc, sc.users, o.conns, o.indexHeaders)
	if err != nil {
		return err
	}
	defer client.close()
	if _, err := calls(client, o.callers, sc.users, sc.users+callgrindWarmup); err != nil {
		return fmt.Errorf("warming up: %w", err)
	}
	if err := callgrindControl("-z", s.pid); err != nil {
		return err
	}
	allowed, err := calls(client, o.callers, sc.users, o.callgrind)
	if err != nil {
		return err
	}
	if err := callgrindControl("-d", s.pid); err != nil {
		return err
	}
	total, err := dumpTotal(out + ".1")
	if err != nil {
		return err
	}
	fmt.Printf("## Scenario %s (%d users), tokenlimit under callgrind\n\n", sc.name, sc.users)
	fmt.Println("| calls | allowed | instructions per decision |")
	fmt.Println("|---:|---:|---:|")
	fmt.Printf("| %d | %.1f%% | %.0f |\n\n", o.callgrind, 100*float64(allowed)/float64(o.callgrind), float64(total)/float64(o.callgrind))
	return nil
}

// calls makes n calls from callers goroutines on users in a scattered
// order, and returns how many were allowed; any failed call is an error.
func calls(client *rlsClient, callers, users, n int) (allowed int64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	var (
		left, ok atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		errs     []error
	)
	left.Store(int64(n))
	for g := range callers {
		call := client.caller()
		wg.Go(func() {
			i := (g * 7717) % users
			for left.Add(-1) >= 0 {
				i = (i + 7919) % users
				allowed, err := call(ctx, i)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				if allowed {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return ok.Load(), errors.Join(errs...)
}

func callgrindControl(flag string, pid int) error {
	out, err := exec.Command("callgrind_control", flag, strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("callgrind_control %s: %w\n%s", flag, err, out)
	}
	return nil
}

// dumpTotal returns the instructions a callgrind dump counted: its summary
// line, or the totals line of older versions.
func dumpTotal(file string) (int64, error) {
	// The dump is written once callgrind_control has returned, but give it
	// a moment to appear.
	var f *os.File
	var err error
	for range 50 {
		if f, err = os.Open(file); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		for _, prefix := range []string{"summary: ", "totals: "} {
			if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no summary line", file)
}
