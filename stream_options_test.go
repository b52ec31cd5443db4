package weir_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/weirhq/weir"
	"github.com/weirhq/weir/store"
)

// A step's stream of JSON chunks (what package uistream writes) is created
// application/json, so readers over HTTP get each chunk as a JSON value; a
// chunk that is not JSON, or another content type asked of the stream,
// fails the write with ErrContentType and writes nothing.
func TestStreamContentType(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Full) {
		e := newEngine(t, s, nil)
		type result struct{ NotJSON, Other, Again, Workflow string }
		wf := weir.Register(e, "typed", func(ctx weir.Context, _ struct{}) (result, error) {
			var r result
			_, err := weir.Step(ctx, "say", func(sc weir.StepContext) (int, error) {
				w := sc.Stream("ui", weir.ContentType("application/json"))
				if _, err := w.WriteString(`{"type":"start"}`); err != nil {
					return 0, err
				}
				_, err := w.WriteString("not json")
				r.NotJSON = errString(err)
				_, err = sc.Stream("ui", weir.ContentType("text/plain")).WriteString("x")
				r.Other = errString(err)
				// Asking again for the same type (parameters aside), or for none, is the same writer.
				if sc.Stream("ui", weir.ContentType("application/json; charset=utf-8")) != w || sc.Stream("ui") != w {
					r.Again = "another writer"
				}
				return 1, w.Flush()
			})
			if err != nil {
				return r, err
			}
			_, err = ctx.Stream("ui", weir.ContentType("text/plain")).WriteString("from the workflow")
			r.Workflow = errString(err)
			return r, nil
		})
		if err := e.Work(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		run, err := wf.Start(testCtx(t), struct{}{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		r, err := run.Result(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		for what, msg := range map[string]string{"a chunk that is not JSON": r.NotJSON, "another type": r.Other, "another type from the workflow": r.Workflow} {
			if !strings.Contains(msg, weir.ErrContentType.Error()) {
				t.Errorf("%s: %q, want ErrContentType", what, msg)
			}
		}
		if r.Again != "" {
			t.Error(r.Again)
		}
		info, err := s.OpenStream(testCtx(t), &store.OpenStreamParams{RunID: run.ID, Name: "ui"})
		if err != nil {
			t.Fatal(err)
		}
		if info.ContentType != "application/json" {
			t.Fatalf("content type %q", info.ContentType)
		}
		var data []string
		for rec, err := range e.Read(testCtx(t), run.ID, "ui", &weir.ReadOptions{View: weir.CommittedView}) {
			if err != nil {
				t.Fatal(err)
			}
			if rec.Kind == weir.KindData {
				data = append(data, string(rec.Data))
			}
		}
		if strings.Join(data, "|") != `{"type":"start"}` {
			t.Fatalf("stream holds %q", data)
		}
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	if !errors.Is(err, weir.ErrContentType) {
		return "not ErrContentType: " + err.Error()
	}
	return err.Error()
}
