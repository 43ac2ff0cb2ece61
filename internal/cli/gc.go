package cli

import "runtime/debug"

// defaultGCPercent is the garbage collector's target when GOGC is unset.
// A consumer's live heap is small (tens of MB; the indexer's encoder
// weights are the largest part) and its garbage is per event: with Go's
// default of 100, collection took about a sixth of the scorer's CPU. At
// 200 the heap may grow to three times the live heap, and the scorer spent
// 3–4 µs less CPU per event in paired runs (docs/performance.md); 400 saved
// no more.
const defaultGCPercent = 200

// tuneGC sets the default GC target unless the operator chose one with
// GOGC (which the runtime has read already).
func tuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
}
