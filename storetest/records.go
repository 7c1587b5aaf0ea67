package storetest

import (
	"time"

	"github.com/tokenlimit/tokenlimit"
)

// reservationRecordCases are the behaviours of reservations as records in
// the store: retries and lost replies replay, an id is bound to its request,
// settling is once, records expire, a settle before its reserve leaves a
// tombstone, and any replica settles any reservation.
func reservationRecordCases() []Case {
	fw10 := tokenlimit.FixedWindowLimit(10, time.Hour)
	return []Case{{
		Name:  "records/a retried reserve replays and charges nothing",
		Limit: fw10,
		Steps: []Step{
			reserve(0, "r", 4, Ok(6, time.Hour)),
			// The first reply was lost: the client sends the same reserve.
			{At: s, Reserve: "r", Probes: []Probe{{Cost: 4, Want: Ok(6, time.Hour)}}, WantReserve: tokenlimit.Replayed},
			at(s, 0, Ok(6, time.Hour-s)),
			settle(2*s, "r", 1),
			at(2*s, 0, Ok(9, time.Hour-2*s)),
			// A replay after the settlement still charges nothing.
			{At: 3 * s, Reserve: "r", Probes: []Probe{{Cost: 4, Want: Ok(6, time.Hour)}}, WantReserve: tokenlimit.Replayed},
			at(3*s, 0, Ok(9, time.Hour-3*s)),
		},
	}, {
		Name:  "records/the same id with another request is a conflict and changes nothing",
		Limit: fw10,
		Steps: []Step{
			reserve(0, "r", 4, Ok(6, time.Hour)),
			{At: s, Reserve: "r", Probes: []Probe{{Cost: 5}}, WantReserve: tokenlimit.Conflict},
			{At: s, Reserve: "r", Probes: []Probe{{Key: "other", Cost: 4}}, WantReserve: tokenlimit.Conflict},
			{At: s, Reserve: "r", Probes: []Probe{{Cost: 4}}, Rules: []tokenlimit.SettleRule{tokenlimit.SettleKeep}, WantReserve: tokenlimit.Conflict},
			at(s, 0, Ok(6, time.Hour-s)),
			atKey(s, "other", 0, Ok(10, 0)),
			settle(2*s, "r", 2), // settles the first request
			at(2*s, 0, Ok(8, time.Hour-2*s)),
		},
	}, {
		Name:  "records/settling twice applies once, from any replica",
		Limit: fw10,
		Steps: []Step{
			reserve(0, "r", 4, Ok(6, time.Hour)),
			{At: s, Settle: "r", Actual: 7, Other: true},
			{At: s, Settle: "r", Actual: 7, WantSettle: tokenlimit.AlreadySettled},
			{At: s, Settle: "r", Actual: 1, Other: true, WantSettle: tokenlimit.AlreadySettled},
			{At: s, Cancel: true, Settle: "r", WantSettle: tokenlimit.AlreadySettled},
			at(s, 0, Ok(3, time.Hour-s)),
		},
	}, {
		Name:  "records/a reserve made on one replica is replayed on another",
		Limit: fw10,
		Steps: []Step{
			reserve(0, "r", 4, Ok(6, time.Hour)),
			{At: s, Reserve: "r", Other: true, Probes: []Probe{{Cost: 4, Want: Ok(6, time.Hour)}}, WantReserve: tokenlimit.Replayed},
			at(s, 0, Ok(6, time.Hour-s)),
		},
	}, {
		Name:  "records/a settle of an unknown id leaves a tombstone: the late reserve charges nothing",
		Limit: fw10,
		Steps: []Step{
			{At: 0, Settle: "late", Actual: 3, WantSettle: tokenlimit.UnknownReservation},
			{At: s, Reserve: "late", Other: true, Probes: []Probe{{Cost: 4}}, WantReserve: tokenlimit.Closed},
			at(s, 0, Ok(10, 0)),
			{At: 2 * s, Settle: "late", Actual: 3, WantSettle: tokenlimit.UnknownReservation},
			at(2*s, 0, Ok(10, 0)),
		},
	}, {
		Name:  "records/a reservation expires with its TTL and its estimate stands",
		Limit: fw10,
		TTL:   10 * s,
		Steps: []Step{
			reserve(0, "r", 4, Ok(6, time.Hour)),
			{At: 10 * s, Settle: "r", Actual: 0, WantSettle: tokenlimit.UnknownReservation},
			at(10*s, 0, Ok(6, time.Hour-10*s)),
			// The tombstone written by that settle expires too: the id is free.
			reserve(20*s, "r", 1, Ok(5, time.Hour-20*s)),
		},
	}, {
		Name:  "records/a denied reserve records nothing: a retry decides anew",
		Limit: fw10,
		Steps: []Step{
			at(0, 8, Ok(2, time.Hour)),
			reserve(s, "r", 4, Deny(2, time.Hour-s, time.Hour-s)),
			reserve(s, "r", 2, Ok(0, time.Hour-s)),
			settle(2*s, "r", 0),
			at(2*s, 0, Ok(2, time.Hour-2*s)),
		},
	}, {
		Name:  "records/rules: a kept charge stays, a released slot and a token estimate settle",
		Limit: fw10,
		Steps: []Step{
			{At: 0, Reserve: "r", Rules: []tokenlimit.SettleRule{tokenlimit.SettleKeep, tokenlimit.SettleRelease, tokenlimit.SettleActual},
				Probes: []Probe{{Key: "req", Cost: 1, Want: Ok(9, time.Hour)}, {Key: "slot", Cost: 1, Want: Ok(9, time.Hour)}, {Key: "tok", Cost: 5, Want: Ok(5, time.Hour)}}},
			settle(s, "r", 3),
			atKey(s, "req", 0, Ok(9, time.Hour-s)),
			atKey(s, "slot", 0, Ok(10, 0)),
			atKey(s, "tok", 0, Ok(7, time.Hour-s)),
		},
	}, {
		Name:  "records/rules: items settle to the spend and to their own measures; one beyond the measures given keeps its charge",
		Limit: fw10,
		Steps: []Step{
			{At: 0, Reserve: "r", Rules: []tokenlimit.SettleRule{tokenlimit.SettleSpend, tokenlimit.MeasureRule(0), tokenlimit.MeasureRule(1), tokenlimit.MeasureRule(2), tokenlimit.SettleActual},
				Probes: []Probe{{Key: "usd", Cost: 4, Want: Ok(6, time.Hour)}, {Key: "in", Cost: 6, Want: Ok(4, time.Hour)}, {Key: "out", Cost: 3, Want: Ok(7, time.Hour)},
					{Key: "past", Cost: 2, Want: Ok(8, time.Hour)}, {Key: "tok", Cost: 9, Want: Ok(1, time.Hour)}}},
			{At: s, Settle: "r", Actual: 5, Spend: new(int64(1)), Measures: []int64{8, 0}, Other: true},
			atKey(s, "usd", 0, Ok(9, time.Hour-s)),
			atKey(s, "in", 0, Ok(2, time.Hour-s)),
			atKey(s, "out", 0, Ok(10, 0)),
			atKey(s, "past", 0, Ok(8, time.Hour-s)),
			atKey(s, "tok", 0, Ok(5, time.Hour-s)),
		},
	}, {
		Name:  "records/cancel refunds every item whatever its rule",
		Limit: fw10,
		Steps: []Step{
			{At: 0, Reserve: "r", Rules: []tokenlimit.SettleRule{tokenlimit.SettleKeep, tokenlimit.SettleActual},
				Probes: []Probe{{Key: "req", Cost: 1, Want: Ok(9, time.Hour)}, {Key: "tok", Cost: 5, Want: Ok(5, time.Hour)}}},
			{At: s, Settle: "r", Cancel: true, Other: true},
			atKey(s, "req", 0, Ok(10, 0)),
			atKey(s, "tok", 0, Ok(10, 0)),
			{At: s, Settle: "r", Actual: 5, WantSettle: tokenlimit.AlreadySettled},
		},
	}, {
		Name:  "records/undo refunds every item and deletes the record: the id reserves afresh",
		Limit: fw10,
		Steps: []Step{
			{At: 0, Reserve: "r", Rules: []tokenlimit.SettleRule{tokenlimit.SettleKeep, tokenlimit.SettleActual},
				Probes: []Probe{{Key: "req", Cost: 1, Want: Ok(9, time.Hour)}, {Key: "tok", Cost: 5, Want: Ok(5, time.Hour)}}},
			{At: s, Settle: "r", Undo: true, Other: true},
			atKey(s, "req", 0, Ok(10, 0)),
			atKey(s, "tok", 0, Ok(10, 0)),
			// Not a replay of the undone reservation: charged again.
			{At: 2 * s, Reserve: "r", Rules: []tokenlimit.SettleRule{tokenlimit.SettleKeep, tokenlimit.SettleActual},
				Probes: []Probe{{Key: "req", Cost: 1, Want: Ok(9, time.Hour-2*s)}, {Key: "tok", Cost: 5, Want: Ok(5, time.Hour-2*s)}}},
			settle(3*s, "r", 2),
			atKey(3*s, "tok", 0, Ok(8, time.Hour-3*s)),
			// Undoing an id with no record leaves a tombstone, as a settle does.
			{At: 3 * s, Settle: "gone", Undo: true, WantSettle: tokenlimit.UnknownReservation},
			{At: 4 * s, Reserve: "gone", Probes: []Probe{{Cost: 4}}, WantReserve: tokenlimit.Closed},
		},
	}, {
		Name:  "records/a reservation of several keys and algorithms settles on another replica",
		Limit: tb10at2,
		Steps: []Step{
			{At: 0, Reserve: "r", Probes: []Probe{{Key: "a", Cost: 8, Want: Ok(2, 4*s)}, {Key: "b", Limit: fw10, Cost: 8, Want: Ok(2, time.Hour)},
				{Key: "c", Limit: tokenlimit.SlidingLogLimit(10, 10*s), Cost: 8, Want: Ok(2, 10*s)}}},
			{At: s, Reserve: "r", Other: true, WantReserve: tokenlimit.Replayed,
				Probes: []Probe{{Key: "a", Cost: 8, Want: Ok(2, 4*s)}, {Key: "b", Limit: fw10, Cost: 8, Want: Ok(2, time.Hour)},
					{Key: "c", Limit: tokenlimit.SlidingLogLimit(10, 10*s), Cost: 8, Want: Ok(2, 10*s)}}},
			{At: s, Settle: "r", Actual: 3, Other: true},
			atKey(s, "a", 0, Ok(9, 500*ms)),
			{At: s, Probes: []Probe{{Key: "b", Limit: fw10, Want: Ok(7, time.Hour-s)}}},
			{At: s, Probes: []Probe{{Key: "c", Limit: tokenlimit.SlidingLogLimit(10, 10*s), Want: Ok(7, 9*s)}}},
		},
	}}
}
