// Package budgetslot maps a budget, a key's hash under an algorithm, to one
// uint64 slot: the map key of the in-process tables that hash each key
// once (the embedded store's budgets, the service's fail-open memory).
// Distinct budgets can share a slot, so those tables chain the entries of
// a slot and compare key and algorithm on lookup.
package budgetslot

import "github.com/tokenlimit/tokenlimit"

// Of is the slot of the budget whose key hashes to h under alg: the hash
// with the algorithm mixed in, so the same key under two algorithms is two
// budgets, as in Redis.
func Of(h uint64, alg tokenlimit.Algorithm) uint64 {
	return h ^ uint64(alg)*0x9e3779b97f4a7c15
}
