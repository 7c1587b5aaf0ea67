package rueidisclient_test

import (
	"context"
	"crypto/tls"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/tcprelay"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
)

// TestDialKeepsACallWithinItsDeadline: with Redis' replies held, a call
// whose context ends between the dial of its connection and rueidis'
// greeting (forced here by a dial that returns only then; on a loaded
// machine building the connection takes that long) returns at its
// deadline, not a second later: rueidis closes such a connection by
// waiting for a PING's reply, and Dial has closed it already. The
// connection that first answered is not closed by a later call's deadline,
// and the client answers again once the replies flow.
func TestDialKeepsACallWithinItsDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	relay, err := tcprelay.Start(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	var held atomic.Bool       // while the replies are held
	var lateDials atomic.Int64 // dials that waited for their context's end
	dial := func(ctx context.Context, dst string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
		conn, err := rueidisclient.Dial(ctx, dst, d, tc)
		if err == nil && ctx.Done() != nil && held.Load() {
			lateDials.Add(1)
			<-ctx.Done() // the call's context ends before rueidis greets Redis
		}
		return conn, err
	}
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{relay.Addr()}, ForceSingleClient: true, DisableCache: true, DisableRetry: true,
		PipelineMultiplex: -1, // one connection: the dial at start, then each redial
		DialCtxFn:         dial,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	stalls := testkit.StartStalls(t)
	ping := func(timeout time.Duration) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := time.Now()
		err := client.Do(ctx, client.B().Ping().Build()).Error()
		return time.Since(start), err
	}
	if _, err := ping(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	relay.Hold(tcprelay.Replies)
	held.Store(true)
	const timeout = 50 * time.Millisecond
	// The first call times out on the connection dialled at start, which
	// rueidis then drops; each later call dials anew.
	for i := range 4 {
		stalledBefore := stalls.Total()
		d, err := ping(timeout)
		stalled := stalls.Total() - stalledBefore
		if err == nil {
			t.Fatalf("call %d answered while Redis' replies are held", i)
		}
		if bound := timeout + 250*time.Millisecond + stalled; d > bound {
			t.Errorf("call %d returned after %v, want within its timeout %v + 250ms + the %v this process was stalled: %v", i, d, timeout, stalled, err)
		}
	}
	if lateDials.Load() == 0 {
		t.Error("no call dialled a connection: the test did not reach its case")
	}

	held.Store(false)
	relay.Release(tcprelay.Replies)
	testkit.Eventually(t, 20*time.Second, "the client answers once the replies flow", func() bool {
		_, err := ping(time.Second)
		return err == nil
	})
}
