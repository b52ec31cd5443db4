// Package harness is what package weir shows its own harnesses
// (internal/torture) and nothing else: facts a checker needs that the
// public API has no reason to expose.
package harness

// StepEpoch, set by package weir, returns the lease epoch of the run's
// execution that runs the step attempt behind sc (a weir.StepContext);
// false if sc is not the engine's. An attempt number is not an attempt's
// identity: an execution that loses its lease before its attempt's start
// is durable leaves that number to the next, which runs the attempt again,
// so the torture checker tells an attempt's runs apart by their epochs.
var StepEpoch func(sc any) (int64, bool)
