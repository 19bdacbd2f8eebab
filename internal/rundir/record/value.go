package record

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Value is a knob's value in the journal: its text, or null. It has the
// fields of policy.Value, so that record.Value(v) converts one (this package
// does not import the policy). It is written as a JSON string or null; a
// number or boolean is read as its JSON text (journals written by hand).
type Value struct {
	Text string
	Null bool
}

// Text returns a Value holding s.
func Text(s string) Value { return Value{Text: s} }

// MarshalJSON writes the text as a JSON string, or null.
func (v Value) MarshalJSON() ([]byte, error) {
	if v.Null {
		return []byte("null"), nil
	}
	return json.Marshal(v.Text)
}

// UnmarshalJSON reads a string, null, a number or a boolean.
func (v *Value) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case string(b) == "null":
		*v = Value{Null: true}
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*v = Value{Text: s}
		return nil
	case len(b) > 0 && (b[0] == '{' || b[0] == '['):
		return fmt.Errorf("knob value: want a string, number, boolean or null, got %.40s", b)
	}
	if !json.Valid(b) {
		return fmt.Errorf("knob value: %.40s is not JSON", b)
	}
	*v = Value{Text: string(b)}
	return nil
}
