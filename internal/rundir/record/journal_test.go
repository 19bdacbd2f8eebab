package record

import (
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 9, 0, 0, 123456789, time.UTC)

// TestEveryEventReadsBackAsWritten: each event of Types, every field set,
// is written by Marshal and read back by Read and Entry.Event unchanged.
// A field whose tag the reader does not know, or that two fields share,
// fails here.
func TestEveryEventReadsBackAsWritten(t *testing.T) {
	for _, ev := range Types {
		want := fill(reflect.TypeOf(ev), 1).Interface().(Event)
		line := Marshal(t0, want)
		entries, bad, err := Read(strings.NewReader(string(line)))
		if err != nil || len(bad) != 0 || len(entries) != 1 {
			t.Fatalf("%s: Read: %v, %v, %d entries\n%s", ev.EventType(), err, bad, len(entries), line)
		}
		e := entries[0]
		if e.Type != ev.EventType() || !e.Time.Equal(t0) || e.Line != 1 {
			t.Errorf("%s: entry %+v", ev.EventType(), e)
		}
		got, err := e.Event()
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: read back %+v (%v)\nwant %+v\nline %s", ev.EventType(), got, err, want, line)
		}
	}
}

// fill returns a value of type t with every field set to something other
// than its zero value (seed makes values differ between fields).
func fill(t reflect.Type, seed int) reflect.Value {
	v := reflect.New(t).Elem()
	switch {
	case t == reflect.TypeOf(time.Time{}):
		v.Set(reflect.ValueOf(t0.Add(time.Duration(seed) * time.Second)))
		return v
	case t == reflect.TypeOf(Value{}):
		v.Set(reflect.ValueOf(Text("v" + string(rune('a'+seed%26)))))
		return v
	}
	switch t.Kind() {
	case reflect.String:
		v.SetString(t.Name() + "-" + string(rune('a'+seed%26)))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(seed))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(seed))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(seed) + 0.5)
	case reflect.Pointer:
		v.Set(fill(t.Elem(), seed).Addr())
	case reflect.Slice:
		v.Set(reflect.Append(v, fill(t.Elem(), seed)))
	case reflect.Map:
		v.Set(reflect.MakeMap(t))
		v.SetMapIndex(fill(t.Key(), seed), fill(t.Elem(), seed))
	case reflect.Struct:
		for i := range t.NumField() {
			if t.Field(i).IsExported() {
				v.Field(i).Set(fill(t.Field(i).Type, seed+i+1))
			}
		}
	default:
		panic("fill: " + t.String())
	}
	return v
}

// TestTypesListsEveryEvent: every type of this package with an EventType
// method is in Types, once, under a type name of its own.
func TestTypesListsEveryEvent(t *testing.T) {
	pkgs, err := parser.ParseDir(token.NewFileSet(), ".", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	for _, f := range pkgs["record"].Files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "EventType" && fd.Recv != nil {
				if id, ok := fd.Recv.List[0].Type.(*ast.Ident); ok {
					declared[id.Name] = true
				}
			}
		}
	}
	listed, names := map[string]bool{}, map[string]string{}
	for _, ev := range Types {
		typ := reflect.TypeOf(ev).Name()
		if prev, dup := names[ev.EventType()]; dup {
			t.Errorf("%s and %s are both %q", prev, typ, ev.EventType())
		}
		names[ev.EventType()], listed[typ] = typ, true
	}
	for name := range declared {
		if !listed[name] {
			t.Errorf("%s has an EventType method but is not in Types: Read would not decode it", name)
		}
	}
	if len(declared) != len(Types) {
		t.Errorf("%d types declare EventType, Types lists %d", len(declared), len(Types))
	}
}

// The line format: time and type first, then the fields by name; nothing
// HTML-escaped (the job's lines hold < and &).
func TestMarshalFormat(t *testing.T) {
	got := string(Marshal(t0, Failure{Attempt: 2, Kind: "gpu_oom", Line: 7, Stream: "stderr", Text: "a <b> & c"}))
	want := `{"time":"2026-03-01T09:00:00.123456789Z","type":"failure","attempt":2,"kind":"gpu_oom","line":7,"stream":"stderr","text":"a <b> & c"}` + "\n"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// Empty optional fields are left out; a nil LogOffset too, 0 is not.
	var zero int64
	got = string(Marshal(t0, AttemptStart{Attempt: 1, PID: 9, Argv: []string{"x"}, LogOffset: &zero}))
	want = `{"time":"2026-03-01T09:00:00.123456789Z","type":"attempt_start","argv":["x"],"attempt":1,"log_offset":0,"pid":9}` + "\n"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// A value that cannot be encoded costs its field, not the event.
func TestMarshalUnencodable(t *testing.T) {
	got := string(Marshal(t0, RunEnd{ExitCode: 3, CPUUserS: math.NaN(), CPUSysS: 0.25}))
	for _, want := range []string{`"type":"run_end"`, `"exit_code":3`, `"cpu_sys_s":0.25`, `"cpu_user_s":"unencodable: json: unsupported value: NaN"`} {
		if !strings.Contains(got, want) {
			t.Errorf("%s lacks %s", got, want)
		}
	}
	if strings.Count(got, "\n") != 1 || !strings.HasSuffix(got, "}\n") {
		t.Errorf("not one line: %q", got)
	}
}

// Journals written by hand, by another version, or cut short by a crash
// still read: the lines that are events are kept, the others listed.
func TestReadLenient(t *testing.T) {
	journal := strings.Join([]string{
		`{"time":"2026-03-01T09:00:00Z","type":"run_start","argv":["python","t.py"],"policy":{"preset":"lightning"},"pid":"42"}`,
		``,
		`{"type":"attempt_start","attempt":1,"knobs":{"batch_size":32,"crop":null,"lr":"1e-4","amp":true},"checkpoint":null}`,
		`{"time":"2026-03-01T09:00:02Z","type":"something_new","attempt":1,"x":[1,2]}`,
		`not json`,
		`{"time":"yesterday","type":"phase"}`,
		`{"attempt":1}`,
		`{"time":"2026-03-01T09:01:01Z","type":"attempt_end","attempt":1,"exit_code":137,"signal":"SIGKILL","duration_s":"60","lines":1.5}`,
		`{"time":"2026-03-01T09:01:02Z","type":"decision","attempt":1,"verb":"relaunch","changes":[{"name":"val_crop_size","old":1024,"new":768}]}`,
		`{"time":"2026-03-01T09:01:02Z","type":"attempt_end","attem`,
	}, "\n")
	entries, bad, err := Read(strings.NewReader(journal))
	if err != nil {
		t.Fatal(err)
	}
	var badLines []int
	for _, b := range bad {
		badLines = append(badLines, b.Line)
	}
	if !reflect.DeepEqual(badLines, []int{5, 6, 7, 10}) || !strings.Contains(bad[0].Error(), "line 5: not a JSON object") ||
		bad[1].Err.Error() != `time "yesterday" is not RFC 3339` || bad[2].Err.Error() != `no "type" field` {
		t.Errorf("bad lines %v", bad)
	}
	if len(entries) != 5 {
		t.Fatalf("%d entries", len(entries))
	}
	ev, err := entries[0].Event()
	if rs := ev.(RunStart); err != nil || rs.Policy != `{"preset":"lightning"}` || rs.PID != 42 || !reflect.DeepEqual(rs.Argv, []string{"python", "t.py"}) {
		t.Errorf("run_start %+v (%v)", ev, err)
	}
	ev, err = entries[1].Event()
	want := map[string]Value{"batch_size": Text("32"), "crop": {Null: true}, "lr": Text("1e-4"), "amp": Text("true")}
	if as := ev.(AttemptStart); err != nil || !entries[1].Time.IsZero() || !reflect.DeepEqual(as.Knobs, want) || as.Checkpoint != "" || as.LogOffset != nil {
		t.Errorf("attempt_start %+v (%v)", ev, err)
	}
	if ev, err := entries[2].Event(); ev != nil || err != nil || entries[2].Type != "something_new" {
		t.Errorf("an unknown type: %v, %v", ev, err)
	}
	ev, err = entries[3].Event()
	if ae := ev.(AttemptEnd); ae.ExitCode != 137 || ae.Signal != "SIGKILL" || ae.DurationS != 60 || ae.Lines != 0 ||
		err == nil || !strings.Contains(err.Error(), "lines:") {
		t.Errorf("attempt_end %+v (%v): want duration 60 from the string, lines left zero and named", ev, err)
	}
	ev, err = entries[4].Event()
	if d := ev.(Decision); err != nil || len(d.Changes) != 1 || d.Changes[0] != (Change{Name: "val_crop_size", Old: Text("1024"), New: Text("768")}) {
		t.Errorf("decision %+v (%v)", ev, err)
	}
}

// A field that does not fit is named; the rest of the event is read.
func TestDecodeNamesTheFieldThatDoesNotFit(t *testing.T) {
	entries, _, _ := Read(strings.NewReader(`{"type":"memory","attempt":2,"summary":{"samples":"many"}}`))
	var m Memory
	err := entries[0].Decode(&m)
	if m.Attempt != 2 || err == nil || !strings.HasPrefix(err.Error(), "summary: ") {
		t.Errorf("%+v, %v", m, err)
	}
	if err := entries[0].Decode(Memory{}); err == nil {
		t.Error("Decode into a value: no error")
	}
}
