package allocconf

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseMirrorsPyTorch(t *testing.T) {
	good := []string{
		"", " ", "a:1", "a:1,", "a : 1 , b : 2", "k:[1:2,3:4]", "k:[>:1],b:True",
		"expandable_segments:True,max_split_size_mb:128,garbage_collection_threshold:0.8",
	}
	bad := []string{"a", "a:", ",a:1", "a:1,,", "a:1:2", "a:[1", "a:[1[2]]", ":", "a::1", "a:1 b:2"}
	for _, s := range good {
		if _, err := Parse(s); err != nil {
			t.Errorf("Parse(%q) = %v, want ok", s, err)
		}
	}
	for _, s := range bad {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) ok, want an error", s)
		}
	}
	l, err := Parse("max_split _size_mb:1 28")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := l.Get("max_split_size_mb"); v != "128" {
		t.Errorf("whitespace inside words is dropped by PyTorch; got %q", v)
	}
}

func TestParseErrors(t *testing.T) {
	for s, want := range map[string]string{
		"expandable_segments":             `option "expandable_segments" has no ':value'`,
		"a:b:c":                           `option "a": expected ',' after its value, found ":"`,
		":True":                           `option has an empty key (":" at byte 1)`,
		"a:1,,b:2":                        `empty option before ',' at byte 5`,
		",a:1":                            `empty option before ',' at byte 1`,
		"roundup_power2_divisions:[256:1": `option "roundup_power2_divisions": list has no closing ']'`,
		"a:[1[2]]":                        `option "a": nested '[' in list`,
		"max_split_size_mb:":              `option "max_split_size_mb" has an empty value`,
		"a:,b:1":                          `option "a" has an empty value`,
	} {
		if _, err := Parse(s); err == nil || err.Error() != want {
			t.Errorf("Parse(%q) = %v, want %s", s, err, want)
		}
	}
}

func TestGetLastWins(t *testing.T) {
	l, err := Parse("max_split_size_mb:512,backend:native,max_split_size_mb:256")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := l.Get("max_split_size_mb"); v != "256" || !ok {
		t.Errorf("Get = %q %v, want the last one, 256", v, ok)
	}
	if _, ok := l.Get("expandable_segments"); ok {
		t.Error("Get found an option that is not there")
	}
}

func TestSplit(t *testing.T) {
	got := Split(" expandable_segments:True, roundup_power2_divisions:[256:1,512:2],, max_split_size_mb : 128,bad")
	want := List{
		{Key: "expandable_segments", Value: "True"},
		{Key: "roundup_power2_divisions", Value: "[256:1,512:2]"},
		{Key: "max_split_size_mb", Value: "128"},
		{Key: "bad", NoValue: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Split = %+v\nwant %+v", got, want)
	}
	if s := got.String(); s != "expandable_segments:True,roundup_power2_divisions:[256:1,512:2],max_split_size_mb:128,bad" {
		t.Errorf("String = %s", s)
	}
	if !got.Has(Option{Key: "max_split_size_mb", Value: "128"}) || got.Has(Option{Key: "max_split_size_mb", Value: "64"}) {
		t.Errorf("Has compares key and value")
	}
}

func TestMerge(t *testing.T) {
	for _, tc := range []struct{ base, override, want string }{
		{"roundup_power2_divisions:[256:1,512:2]", "garbage_collection_threshold:0.6", "roundup_power2_divisions:[256:1,512:2],garbage_collection_threshold:0.6"},
		{"expandable_segments:False,max_split_size_mb:64", "expandable_segments:True", "expandable_segments:True,max_split_size_mb:64"},
		{"a:1,b:2,a:3", "a:4", "a:4,b:2,a:4"},
		{"", "a:1,b:2", "a:1,b:2"},
	} {
		base := Split(tc.base)
		keep := base.String()
		if got := Merge(base, Split(tc.override)).String(); got != tc.want {
			t.Errorf("Merge(%q, %q) = %q, want %q", tc.base, tc.override, got, tc.want)
		}
		if base.String() != keep {
			t.Errorf("Merge modified its base")
		}
	}
}

func TestSet(t *testing.T) {
	for _, tc := range []struct{ s, key, value, want string }{
		{"", "expandable_segments", "True", "expandable_segments:True"},
		{"  ", "a", "1", "a:1"},
		{"max_split_size_mb:128", "expandable_segments", "True", "max_split_size_mb:128,expandable_segments:True"},
		{" max_split_size_mb : 64 , ", "expandable_segments", "True", " max_split_size_mb : 64 ,expandable_segments:True"},
		{"max_split_size_mb : 512 ,backend:native", "max_split_size_mb", "64", "max_split_size_mb : 64 ,backend:native"},
		{"roundup_power2_divisions:4", "roundup_power2_divisions", "[256:1,>:4]", "roundup_power2_divisions:[256:1,>:4]"},
		{"k:[1, 2],b:1", "k", "[3]", "k:[3],b:1"},
		{"a:512,a:256", "a", "64", "a:64,a:64"},
		{"a:1,\n", "b", "2", "a:1,b:2"}, // not "a:1,\n,b:2", which PyTorch reads as ",,"
	} {
		got, err := Set(tc.s, tc.key, tc.value)
		if err != nil || got != tc.want {
			t.Errorf("Set(%q, %q, %q) = %q, %v; want %q", tc.s, tc.key, tc.value, got, err, tc.want)
		}
	}
	if got, err := Set("a:b:c", "a", "1"); err == nil || got != "a:b:c" {
		t.Errorf("Set on a malformed value = %q, %v; want it unchanged and an error", got, err)
	}
}

func TestCheck(t *testing.T) {
	for _, o := range []Option{{Key: "", Value: "1"}, {Key: "a:b", Value: "1"}, {Key: "a", Value: ""}, {Key: "a", Value: "1,2"}, {Key: "a", Value: "x y"}, {Key: "a", Value: "[1:2"}, {Key: "a", Value: "[]"}, {Key: "a", Value: "[[1]]"}} {
		if o.Check() == nil {
			t.Errorf("Check(%+v) accepted an option that cannot be written", o)
		}
	}
	for _, o := range []Option{{Key: "expandable_segments", Value: "True"}, {Key: "roundup_power2_divisions", Value: "[256:1,>:4]"}} {
		if err := o.Check(); err != nil {
			t.Errorf("Check(%+v) = %v", o, err)
		}
	}
	want := `invalid value "b c" for allocator option "a": give one word, or a [bracketed,list]`
	if err := (Option{Key: "a", Value: "b c"}).Check(); err == nil || err.Error() != want {
		t.Errorf("Check = %v, want %s", err, want)
	}
}

// FuzzParse: the two readings agree on what PyTorch accepts, and Set writes
// values that read back.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "a:1,", "a : 1 , b : 2", "k:[1:2, 3:4],b:True", "max_split _size_mb:1 28", "a:b:c", "a:[1", ",a:1", "[a,b]:1", "a:1]x,b:[2"} {
		f.Add(s, "b", "2")
	}
	f.Fuzz(func(t *testing.T, s, key, value string) {
		l, err := Parse(s)
		if err != nil {
			return
		}
		split := Split(s)
		if len(split) != len(l) {
			t.Fatalf("Parse %v, Split %v", l, split)
		}
		for i, o := range split {
			// Split trims Unicode spaces too; PyTorch drops ASCII ones only.
			if isASCII(s) && (o.NoValue || noSpace(o.Key) != l[i].Key || noSpace(o.Value) != l[i].Value) {
				t.Fatalf("option %d: Parse %+v, Split %+v", i, l[i], o)
			}
		}
		o := Option{Key: key, Value: value}
		if o.Check() != nil || noSpace(key+value) != key+value {
			return // Check lets \v and \f through, which PyTorch drops
		}
		out, err := Set(s, key, value)
		if err != nil {
			t.Fatalf("Set on a value that parses: %v", err)
		}
		after, err := Parse(out)
		if err != nil {
			t.Fatalf("Set(%q) = %q, which does not parse: %v", s, out, err)
		}
		if got, _ := after.Get(key); got != value {
			t.Fatalf("Set(%q) = %q, which reads %s=%q", s, out, key, got)
		}
	})
}

// noSpace drops the whitespace PyTorch's tokenizer drops.
func noSpace(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if !strings.ContainsRune(" \t\n\r\v\f", rune(s[i])) {
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
