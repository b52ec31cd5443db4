// Package difftest holds the differential test of weir's store backends:
// seeded random sequences of store operations run on SQLite and on
// PostgreSQL side by side, and every result, error and read view must be
// equal. The conformance suite (storetest) says what a store must do case
// by case; this finds the cases it does not list, where two backends that
// both pass it still answer differently.
//
// It runs with the other tests on a bounded number of seeds, and longer with
// flags:
//
//	go test ./store/difftest -difftest.seeds 500 -difftest.ops 2000
//	go test ./store/difftest -difftest.seed 1234   # replay one seed
//
// A failing seed prints the operations that led to the difference.
package difftest
