package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/internal/redistest"
	"github.com/tokenlimit/tokenlimit/internal/tcprelay"
	"github.com/tokenlimit/tokenlimit/internal/testkit"
	"github.com/tokenlimit/tokenlimit/redisstore/goredisclient"
	"github.com/tokenlimit/tokenlimit/redisstore/rueidisclient"
	"github.com/tokenlimit/tokenlimit/storetest"
)

// A check whose reply is lost after Redis ran it (the connection ends
// cleanly, so go-redis reads EOF) is not sent again through the go-redis
// adapter, on a client left at go-redis' default of 3 retries: the call
// fails, and its key is charged once. go-redis resends a command whose
// reply it did not read, which charged such a check twice (and, once the
// resent call's reply came, answered it as one admitted request).
func TestGoRedisNeverResendsACheck(t *testing.T) {
	srv := redistest.Start(t)
	relay, err := tcprelay.Start(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	prefix := newPrefix()
	st := newStore(t, goredisclient.New(goRedisClient(t, relay.Addr())), callerTime(prefix))
	limit := tokenlimit.FixedWindowLimit(100, time.Hour)
	check := func(key string, cost int64) (tokenlimit.Result, error) {
		res := make([]tokenlimit.Result, 1)
		_, err := st.Check(context.Background(), storetest.Base, []tokenlimit.Item{{Key: key, Limit: limit, Cost: cost}}, res)
		return res[0], err
	}
	if _, err := check("warm", 0); err != nil { // dials and loads the library
		t.Fatal(err)
	}

	relay.Hold(tcprelay.Replies)
	repliesBefore := relay.Read(tcprelay.Replies)
	done := make(chan error, 1)
	go func() {
		_, err := check("lost", 1)
		done <- err
	}()
	testkit.Eventually(t, 30*time.Second, "Redis answered the check into the held relay", func() bool {
		return relay.Read(tcprelay.Replies) > repliesBefore
	})
	requests := relay.Read(tcprelay.Requests)
	relay.Cut()
	var callErr error
	testkit.Eventually(t, 30*time.Second, "the call returned, or the client sent more", func() bool {
		select {
		case callErr = <-done:
			return true
		default:
			return relay.Read(tcprelay.Requests) > requests
		}
	})
	if relay.Read(tcprelay.Requests) > requests { // a resend (or its connection's handshake)
		relay.Release(tcprelay.Replies)
		callErr = <-done
	}
	if callErr == nil {
		t.Error("the check whose reply was lost succeeded: it was sent again")
	}

	direct := newStore(t, rueidisclient.New(rueidisClient(t, srv.Addr())), callerTime(prefix))
	res := make([]tokenlimit.Result, 1)
	if _, err := direct.Check(context.Background(), storetest.Base, []tokenlimit.Item{{Key: "lost", Limit: limit}}, res); err != nil {
		t.Fatal(err)
	}
	if charged := limit.Quota - res[0].Remaining; charged != 1 {
		t.Errorf("the key was charged %d by one check, want 1", charged)
	}
}
