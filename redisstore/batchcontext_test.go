package redisstore

import (
	"context"
	"testing"
	"time"
)

// A batch call's context ends when the last of its callers' could: a
// context they all share is the call's own; of distinct ones the latest
// deadline holds, none if one caller has none, and no caller's cancellation
// ends the call.
func TestBatchContextEndsWithTheLastCaller(t *testing.T) {
	t.Parallel()
	now := time.Now()
	shared, cancelShared := context.WithDeadline(context.Background(), now.Add(time.Hour))
	defer cancelShared()
	early, cancelEarly := context.WithDeadline(context.Background(), now.Add(time.Hour))
	late, cancelLate := context.WithDeadline(context.Background(), now.Add(2*time.Hour))
	defer cancelLate()
	unbounded, cancelUnbounded := context.WithCancel(context.Background())

	for _, ctxs := range [][]context.Context{{shared, shared, shared}, {context.Background(), context.Background()}} {
		if ctx, cancel := batchContext(ctxs); ctx != ctxs[0] {
			t.Errorf("callers sharing %v: the call's context is %v, want theirs", ctxs[0], ctx)
			cancel()
		}
	}

	bounded, cancelBounded := batchContext([]context.Context{early, late, shared})
	defer cancelBounded()
	if at, ok := bounded.Deadline(); !ok || !at.Equal(now.Add(2*time.Hour)) {
		t.Errorf("distinct deadlines: the call's deadline is %v, %v, want the latest, %v", at, ok, now.Add(2*time.Hour))
	}
	open, cancelOpen := batchContext([]context.Context{early, unbounded})
	defer cancelOpen()
	if at, ok := open.Deadline(); ok {
		t.Errorf("a caller without a deadline: the call's deadline is %v, want none", at)
	}
	cancelEarly()
	cancelUnbounded()
	if bounded.Err() != nil || open.Err() != nil {
		t.Errorf("callers that gave up ended the call: %v, %v", bounded.Err(), open.Err())
	}
}
