// Package world holds the rules of weir's World: the backend that lets a
// Vercel Workflow app (workflow@4, World spec 3) keep its runs, steps,
// hooks, waits, queue and streams in weir. Like package stream, it is pure:
// every store calls it inside its own transaction, so the rules live once.
//
// # Basics
//
// A World changes state only through events (world.events.create). [Decide]
// takes what a store loaded for one event (the run, the step, hook or wait
// the event's correlation id names, the live hook holding a token) and the
// request, and returns what to write: the events to append at the run's next
// slots, the entities to create or change, and the stream effects that make
// a step's stream output exactly-once (a fence raised when an attempt
// starts, a commit when it completes, an abort when it fails). Or it refuses
// the event with one of the errors below, whose statuses the runtime relies
// on: a conflict (409) is a normal path of a replay.
//
// The state machine follows the reference World (world-local 4.4.1) event
// by event; where weir differs it says so in docs/world.md.
package world
