// Package weir runs durable workflows in Go whose streams are exactly-once.
//
// A workflow is a Go function registered by name. Its durable operations —
// steps, sleeps and stream writes — are recorded in the run's event log, so a
// run survives crashes: after one, any worker replays the function from the
// top, recorded operations return their recorded results, and the step that
// was running starts its next attempt.
//
// A step can stream its output (LLM tokens, progress, logs) to readers while
// it runs. Unlike a bare append, weir's stream writes carry a writer identity
// that survives attempts: when a retried step writes the same bytes again,
// they are adopted, not appended, so readers see each chunk once; when the
// retry writes something else, the earlier attempt's suffix is aborted at the
// first difference and the committed view holds only the successful
// attempt's output. docs/semantics.md says exactly what readers see.
//
// # Basics
//
//	s, _ := sqlitestore.Open(ctx, "weir.db", nil)
//	e, _ := weir.New(s, nil)
//	answer := weir.Register(e, "answer", func(ctx weir.Context, q string) (string, error) {
//		return weir.Step(ctx, "generate", func(sc weir.StepContext) (string, error) {
//			out := sc.Stream("tokens")
//			for _, tok := range strings.Fields("forty two") {
//				out.WriteString(tok)
//			}
//			return "42", nil
//		})
//	})
//	_ = e.Work(ctx)
//	h, _ := answer.Start(ctx, "meaning of life?", nil)
//	for rec, err := range e.Read(ctx, h.ID, "tokens", &weir.ReadOptions{Follow: true}) { … }
//	out, err := h.Result(ctx)
//
// # Caveats
//
// Workflow functions must be deterministic: a replay that reaches a different
// operation at a position than the log holds fails the run with
// ErrNonDeterminism. A Context is for the workflow's own goroutine; steps run
// on it, one at a time. Step output is encoded as JSON, so it must survive a
// JSON round trip.
package weir
