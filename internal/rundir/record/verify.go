package record

// Verify is what the job said it runs with, after a relaunch that changed a
// knob: the value set, the value the job said it used, and where it said
// so. Held is false for a change that did not take hold (the job restored
// the old value from its checkpoint, say): that attempt is no evidence
// about the knob.
type Verify struct {
	Attempt int    `json:"attempt"`
	Knob    string `json:"knob"`
	Set     string `json:"set"`
	Used    string `json:"used"`
	Held    bool   `json:"held"`
	// Line, Stream and Text: the output line that gave the value.
	Line   int    `json:"line"`
	Stream string `json:"stream,omitempty"`
	Text   string `json:"text"`
}

func (Verify) EventType() string { return "verify" }
