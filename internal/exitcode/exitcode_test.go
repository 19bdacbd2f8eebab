package exitcode

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

type coder struct{}

func (coder) Error() string { return "coder" }
func (coder) ExitCode() int { return 3 }

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, OK},
		{"Error", &Error{Code: Config, Msg: "bad policy"}, Config},
		{"wrapped Error", fmt.Errorf("loading: %w", &Error{Code: NoInput, Err: fs.ErrNotExist}), NoInput},
		{"status", Status(137), 137},
		{"anything with ExitCode", fmt.Errorf("x: %w", coder{}), 3},
		{"plain error", errors.New("boom"), Software},
	} {
		if got := Of(tc.err); got != tc.want {
			t.Errorf("%s: Of(%v) = %d, want %d", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestStatusAndSilent(t *testing.T) {
	if err := Status(OK); err != nil {
		t.Errorf("Status(0) = %v, want nil", err)
	}
	if err := Status(Busy); !Silent(err) || err.Error() != "exit status 1" {
		t.Errorf("Status(1) = %v, silent %v", err, Silent(err))
	}
	for _, err := range []error{
		nil,
		errors.New("boom"),
		&Error{Code: Usage, Msg: "no command given"},
		&Error{Code: NoInput, Err: fs.ErrNotExist},
		fmt.Errorf("wrapped: %w", Status(Config)),
	} {
		if Silent(err) {
			t.Errorf("Silent(%v) = true: it has something to say", err)
		}
	}
}

func TestErrorMessage(t *testing.T) {
	e := &Error{Code: CantCreate, Err: fs.ErrPermission}
	if e.Error() != fs.ErrPermission.Error() || !errors.Is(e, fs.ErrPermission) {
		t.Errorf("%q does not show or wrap its cause", e.Error())
	}
	e.Msg = "cannot create the run directory"
	if e.Error() != e.Msg {
		t.Errorf("%q, want the message", e.Error())
	}
}
