package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Signals. The first SIGINT (Ctrl-C) or SIGTERM stops a training command gracefully: the trainer
// finishes its current step (of SFT or GRPO) or evaluation split, saves a checkpoint and
// returns, and the command exits with 128+signal (130 for SIGINT, 143 for SIGTERM); the same
// command then resumes. A second signal exits at once with the same code (the run resumes from
// its newest checkpoint).

// signalError is the cause of a context cancelled by a signal.
type signalError struct{ sig os.Signal }

func (e signalError) Error() string { return "received " + sigName(e.sig) }

// code returns the conventional exit status of a process stopped by the signal.
func (e signalError) code() int {
	if s, ok := e.sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 130
}

func sigName(s os.Signal) string {
	switch s {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// exitAtOnce ends the process on a second signal; a variable so that tests can see the call.
var exitAtOnce = os.Exit

// signalContext returns a context cancelled (with a signalError cause) by the first SIGINT or
// SIGTERM; a second one exits the process at once. stop releases the signals.
func signalContext(stderr io.Writer) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		first := true
		for {
			select {
			case <-done:
				return
			case sig := <-ch:
				e := signalError{sig}
				if first {
					first = false
					fmt.Fprintf(stderr, "\nagrl: %s: stopping after the current step and saving a checkpoint (again to exit at once)\n", sigName(sig))
					cancel(e)
					continue
				}
				fmt.Fprintf(stderr, "\nagrl: second %s: exiting at once; the run resumes from its newest checkpoint\n", sigName(sig))
				exitAtOnce(e.code())
			}
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}

// interrupted is the error of a command stopped by a signal: exit status 128+signal.
type interrupted struct {
	sig signalError
	err error
}

func (e interrupted) Error() string { return e.err.Error() }
func (e interrupted) Unwrap() error { return e.err }

// asInterrupted wraps err when ctx was cancelled by a signal.
func asInterrupted(ctx context.Context, err error) error {
	var se signalError
	if err != nil && errors.As(context.Cause(ctx), &se) {
		return interrupted{sig: se, err: err}
	}
	return err
}
