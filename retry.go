package weir

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// RetryPolicy says how often and how soon a failed step runs again. A worker
// that dies mid-step ends that attempt too: the next worker's replay starts
// the next attempt, and it counts toward MaxAttempts.
type RetryPolicy struct {
	// MaxAttempts is the most attempts, the first included. Defaults to 3;
	// 1 means no retry.
	MaxAttempts int
	// InitialInterval is the wait before the second attempt. Defaults to
	// 100ms; NoWait retries at once.
	InitialInterval time.Duration
	// BackoffCoefficient multiplies the wait after each attempt. Defaults to 2.
	BackoffCoefficient float64
	// MaxInterval caps the wait. Defaults to 30s.
	MaxInterval time.Duration
	// Jitter spreads each wait by up to this fraction either way (0.1: ±10%).
	// Defaults to 0.1; a negative value turns it off.
	Jitter float64
	// NonRetryable lists errors that fail the step at once (matched with
	// errors.Is), besides those wrapped with NonRetryable.
	NonRetryable []error
}

// NoWait is a zero duration where zero means "the default": a
// RetryPolicy.InitialInterval that retries at once, a Config.ParkAfter
// that parks at every wait.
const NoWait time.Duration = -1

// DefaultRetryPolicy is the policy of a step given none.
var DefaultRetryPolicy = RetryPolicy{
	MaxAttempts:        3,
	InitialInterval:    100 * time.Millisecond,
	BackoffCoefficient: 2,
	MaxInterval:        30 * time.Second,
	Jitter:             0.1,
}

// WithDefaults returns a copy of p with every zero field set to its default.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	d := DefaultRetryPolicy
	if p.MaxAttempts == 0 {
		p.MaxAttempts = d.MaxAttempts
	}
	if p.InitialInterval == 0 {
		p.InitialInterval = d.InitialInterval
	}
	if p.BackoffCoefficient == 0 {
		p.BackoffCoefficient = d.BackoffCoefficient
	}
	if p.MaxInterval == 0 {
		p.MaxInterval = d.MaxInterval
	}
	if p.Jitter == 0 {
		p.Jitter = d.Jitter
	}
	return p
}

func (p RetryPolicy) validate() error {
	switch {
	case p.MaxAttempts < 1:
		return fmt.Errorf("retry policy: MaxAttempts %d, want >= 1", p.MaxAttempts)
	case p.InitialInterval < 0 && p.InitialInterval != NoWait || p.MaxInterval < 0:
		return fmt.Errorf("retry policy: negative interval (NoWait asks for none)")
	case p.BackoffCoefficient < 1:
		return fmt.Errorf("retry policy: BackoffCoefficient %g, want >= 1", p.BackoffCoefficient)
	case p.Jitter > 1:
		return fmt.Errorf("retry policy: Jitter %g, want <= 1", p.Jitter)
	}
	return nil
}

// Backoff returns the wait after the given failed attempt (1-based).
func (p RetryPolicy) Backoff(attempt int64) time.Duration {
	if p.InitialInterval == NoWait {
		return 0
	}
	d := float64(p.InitialInterval) * math.Pow(p.BackoffCoefficient, float64(attempt-1))
	if m := float64(p.MaxInterval); d > m {
		d = m
	}
	if p.Jitter > 0 {
		d *= 1 + p.Jitter*(2*rand.Float64()-1)
	}
	return time.Duration(d)
}

// retryable reports whether err may be retried under p.
func (p RetryPolicy) retryable(err error) bool {
	if IsNonRetryable(err) || errors.Is(err, ErrCancelled) || errors.Is(err, ErrNonDeterminism) {
		return false
	}
	for _, t := range p.NonRetryable {
		if errors.Is(err, t) {
			return false
		}
	}
	return true
}
