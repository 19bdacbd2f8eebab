package record

import "github.com/gpuguard/gpuguard/internal/probes/classify"

// Hang is the stall watchdog's evidence when it stops an attempt: the job
// printed no training step for longer than its rhythm allows.
type Hang struct {
	Attempt int            `json:"attempt"`
	Phase   classify.Phase `json:"phase"`
	// SinceS: seconds since the last progress (the last step, or the start
	// of the phase or of the attempt when none was printed since).
	SinceS float64 `json:"since_s"`
	// LimitS: the stall allowed there; UsualS: the usual interval between
	// steps it was derived from (0: none known, the policy's max applied).
	LimitS float64 `json:"limit_s"`
	UsualS float64 `json:"usual_s"`
	// The last step and its line (absent when the attempt printed none).
	Step     *int64 `json:"step,omitempty"`
	StepLine int    `json:"step_line,omitempty"`
	StepText string `json:"step_text,omitempty"`
	// Stacks: `py-spy dump --pid` of the job's main process when py-spy is
	// on PATH; StacksError says why there is none when it failed.
	Stacks      string `json:"stacks,omitempty"`
	StacksError string `json:"stacks_error,omitempty"`
}

func (Hang) EventType() string { return "hang" }
