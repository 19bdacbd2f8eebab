package policy

import (
	"reflect"
	"testing"
)

func TestParseOptions(t *testing.T) {
	got := parseOptions(" expandable_segments:True, roundup_power2_divisions:[256:1,512:2],, max_split_size_mb : 128,bad")
	want := []option{
		{key: "expandable_segments", value: "True", hasValue: true},
		{key: "roundup_power2_divisions", value: "[256:1,512:2]", hasValue: true},
		{key: "max_split_size_mb", value: "128", hasValue: true},
		{key: "bad"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseOptions = %+v\nwant %+v", got, want)
	}
	if m := mergeOptions("roundup_power2_divisions:[256:1,512:2]", "garbage_collection_threshold:0.6"); m != "roundup_power2_divisions:[256:1,512:2],garbage_collection_threshold:0.6" {
		t.Errorf("merge keeps a bracketed list whole: %s", m)
	}
}
