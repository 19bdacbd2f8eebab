package record

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Marshal returns ev as one line of events.jsonl, newline included:
// {"time":t,"type":ev.EventType(), then ev's fields by name}. Nothing is
// HTML-escaped. A field that cannot be encoded (a NaN) is written as the
// text "unencodable: <why>", so that the rest of the event is kept.
func Marshal(t time.Time, ev Event) []byte {
	ev = redacted(ev) // secrets masked: redact.go
	fields := encodeFields(ev)
	keys := make([]string, 0, len(fields))
	for k := range fields {
		if k != "time" && k != "type" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b bytes.Buffer
	b.WriteString(`{"time":`)
	b.Write(encode(t.Format(time.RFC3339Nano)))
	b.WriteString(`,"type":`)
	b.Write(encode(ev.EventType()))
	for _, k := range keys {
		b.WriteByte(',')
		b.Write(encode(k))
		b.WriteByte(':')
		b.Write(fields[k])
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// encode is json.Marshal without HTML escaping. Strings always encode.
func encode(v any) []byte {
	b, _ := encodeErr(v)
	return b
}

func encodeErr(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// encodeFields encodes ev's fields, one by one when the whole does not
// encode.
func encodeFields(ev Event) map[string]json.RawMessage {
	var fields map[string]json.RawMessage
	if b, err := encodeErr(ev); err == nil && json.Unmarshal(b, &fields) == nil {
		return fields
	}
	fields = map[string]json.RawMessage{}
	v := reflect.Indirect(reflect.ValueOf(ev))
	for i := range v.NumField() {
		name, omit, ok := jsonName(v.Type().Field(i))
		if !ok || (omit && isEmpty(v.Field(i))) {
			continue
		}
		b, err := encodeErr(v.Field(i).Interface())
		if err != nil {
			b = encode("unencodable: " + err.Error())
		}
		fields[name] = b
	}
	return fields
}

// jsonName is the key of struct field f, whether it is omitted when empty,
// and false for a field that is not encoded. (Events embed no structs.)
func jsonName(f reflect.StructField) (name string, omitEmpty, ok bool) {
	if !f.IsExported() || f.Anonymous {
		return "", false, false
	}
	tag := f.Tag.Get("json")
	name, opts, _ := strings.Cut(tag, ",")
	if name == "-" && opts == "" {
		return "", false, false
	}
	if name == "" {
		name = f.Name
	}
	for _, o := range strings.Split(opts, ",") {
		omitEmpty = omitEmpty || o == "omitempty" || o == "omitzero"
	}
	return name, omitEmpty, true
}

func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Slice, reflect.Map, reflect.String, reflect.Array:
		return v.Len() == 0
	}
	return v.IsZero()
}

// Entry is one event of events.jsonl as read.
type Entry struct {
	Line   int       // its line number, from 1
	Time   time.Time // zero when the line has no time
	Type   string
	fields map[string]json.RawMessage
}

// LineError is a line of events.jsonl that is not an event.
type LineError struct {
	Line int
	Err  error
}

func (e LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

// Read reads events.jsonl. A line that is not an event (not a JSON object,
// no "type", a "time" that is not RFC 3339: a line cut short by a crash, or
// written by another program) is left out of entries and listed in bad;
// blank lines are ignored. err is a read error; the entries before it are
// returned.
func Read(r io.Reader) (entries []Entry, bad []LineError, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if line = bytes.TrimSpace(line); len(line) > 0 {
			if e, perr := parseLine(line); perr != nil {
				bad = append(bad, LineError{Line: n, Err: perr})
			} else {
				e.Line = n
				entries = append(entries, e)
			}
		}
		if err == io.EOF {
			return entries, bad, nil
		}
		if err != nil {
			return entries, bad, err
		}
	}
}

func parseLine(line []byte) (Entry, error) {
	var e Entry
	if err := json.Unmarshal(line, &e.fields); err != nil {
		return e, fmt.Errorf("not a JSON object (%v)", shorten(err.Error(), 80))
	}
	if json.Unmarshal(e.fields["type"], &e.Type) != nil || e.Type == "" {
		return e, errors.New(`no "type" field`)
	}
	var ts string
	if json.Unmarshal(e.fields["time"], &ts) == nil && ts != "" {
		t, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			return e, fmt.Errorf("time %q is not RFC 3339", ts)
		}
		e.Time = t
	}
	return e, nil
}

// Has reports whether the entry has the field name (null counts as absent),
// for a reader that must tell a missing field from a zero one.
func (e Entry) Has(name string) bool {
	raw, ok := e.fields[name]
	return ok && string(raw) != "null"
}

var eventTypes = func() map[string]reflect.Type {
	m := make(map[string]reflect.Type, len(Types))
	for _, ev := range Types {
		m[ev.EventType()] = reflect.TypeOf(ev)
	}
	return m
}()

// Event decodes the entry as the event of its type: a value of one of
// Types (RunStart, Signal, ...), or nil for a type this gpuguard does not
// know. It decodes as Decode does, and returns Decode's error with the
// event.
func (e Entry) Event() (Event, error) {
	t, ok := eventTypes[e.Type]
	if !ok {
		return nil, nil
	}
	p := reflect.New(t)
	err := e.Decode(p.Interface().(Event))
	return p.Elem().Interface().(Event), err
}

// Decode fills the event ev points to from the entry's fields, leniently,
// so that a journal written by another version or by hand still reads:
// unknown fields are ignored; a number written as a string ("60") is read
// as the number; a text field given other JSON takes its compact text. A
// field whose value does not fit otherwise is left zero and named in the
// error; the other fields are filled.
func (e Entry) Decode(ev Event) error {
	v := reflect.ValueOf(ev)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("record: Decode needs a pointer to an event struct, not %T", ev)
	}
	v = v.Elem()
	var errs []error
	for i := range v.NumField() {
		name, _, ok := jsonName(v.Type().Field(i))
		if !ok {
			continue
		}
		raw, ok := e.fields[name]
		if !ok || string(raw) == "null" {
			continue
		}
		if err := decodeField(raw, v.Field(i)); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", name, err))
		}
	}
	return errors.Join(errs...)
}

func decodeField(raw json.RawMessage, fv reflect.Value) error {
	err := json.Unmarshal(raw, fv.Addr().Interface())
	if err == nil {
		return nil
	}
	fv.SetZero() // Unmarshal may have filled part of it
	t := fv.Type()
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	val := reflect.New(t).Elem()
	var s string
	isString := json.Unmarshal(raw, &s) == nil
	switch {
	case t.Kind() == reflect.String && !isString:
		var b bytes.Buffer
		if json.Compact(&b, raw) != nil {
			return err
		}
		val.SetString(b.String())
	case isString && setNumber(val, strings.TrimSpace(s)):
	default:
		return err
	}
	if fv.Kind() == reflect.Pointer {
		fv.Set(val.Addr())
	} else {
		fv.Set(val)
	}
	return nil
}

// setNumber sets the number v from its text s, and reports whether s is
// one that fits v.
func setNumber(v reflect.Value, s string) bool {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return false
	}
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		v.SetFloat(f)
		return true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if f != math.Trunc(f) || v.OverflowInt(int64(f)) || math.Abs(f) > 1<<62 {
			return false
		}
		v.SetInt(int64(f))
		return true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if f != math.Trunc(f) || f < 0 || f > 1<<63 || v.OverflowUint(uint64(f)) {
			return false
		}
		v.SetUint(uint64(f))
		return true
	}
	return false
}

func shorten(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
