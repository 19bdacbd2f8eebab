package policy

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Value is a knob's value as text, exactly as the user wrote it ("64",
// "1e-4", "16-mixed"), so that a value gpuguard did not change reaches the
// job unchanged. Null is a value too: a YAML null, as in a crop size of null
// meaning full resolution. The zero Value is the empty text.
//
// In JSON a Value is its text as a string, or null.
type Value struct {
	Text string
	Null bool
}

// Text returns a Value holding s.
func Text(s string) Value { return Value{Text: s} }

// null is the null value.
var null = Value{Null: true}

// String returns the text, or "null" for the null value.
func (v Value) String() string {
	if v.Null {
		return "null"
	}
	return v.Text
}

// MarshalJSON writes the text as a JSON string, or null.
func (v Value) MarshalJSON() ([]byte, error) {
	if v.Null {
		return []byte("null"), nil
	}
	return json.Marshal(v.Text)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (v *Value) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*v = null
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("knob value: want a string or null, got %s", b)
	}
	*v = Value{Text: s}
	return nil
}

// Values maps knob names to their values. Environment variables that the
// policy's env actions set are kept under EnvKey(name).
type Values map[string]Value

// EnvKey is the key under which Values keeps an environment variable set by
// a set_env or merge_env action. Knob names cannot contain ':', so the two
// never collide.
func EnvKey(name string) string { return "env:" + name }

// clone returns a copy of vs that can be changed without changing vs.
func (vs Values) clone() Values {
	out := make(Values, len(vs))
	for k, v := range vs {
		out[k] = v
	}
	return out
}

// number is a knob value read as a number.
type number struct {
	f     float64
	isInt bool
}

// parseNumber reads v as an integer ("64", "-1") or a float ("0.7",
// "1e-4"). ok is false for null and for text that is not a number.
func parseNumber(v Value) (number, bool) {
	if v.Null {
		return number{}, false
	}
	s := strings.TrimSpace(v.Text)
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return number{f: float64(i), isInt: true}, true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return number{}, false
	}
	return number{f: f}, true
}

// formatNumber writes n as an integer when it is one, else in the shortest
// form that reads back to the same float.
func formatNumber(f float64, isInt bool) string {
	if isInt {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
