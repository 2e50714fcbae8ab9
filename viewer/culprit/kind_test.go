package culprit

import (
	"encoding/json"
	"testing"
)

// TestKindText: every kind keeps the text the report and its JSON carried
// when kinds were strings, and reads back from it.
func TestKindText(t *testing.T) {
	want := map[Kind]string{
		KindBehind: "behind", KindKernel: "kernel", KindHost: "host", KindDState: "dstate", KindPython: "python",
		KindStack: "stack", KindOdd: "odd", KindNative: "native", KindMissing: "missing", KindBackground: "background",
	}
	if len(want) != len(kindNames) {
		t.Fatalf("%d kinds, %d spelled here", len(kindNames), len(want))
	}
	for k, text := range want {
		if k.String() != text {
			t.Errorf("kind %d spelled %q, want %q", k, k, text)
		}
		b, err := json.Marshal(Finding{Kind: k})
		if err != nil {
			t.Fatal(err)
		}
		var back struct{ Kind string }
		if err := json.Unmarshal(b, &back); err != nil || back.Kind != text {
			t.Errorf("kind %s as JSON: %s (%v)", k, b, err)
		}
		var f Finding
		if err := json.Unmarshal(b, &f); err != nil || f.Kind != k {
			t.Errorf("kind %s read back as %s (%v)", k, f.Kind, err)
		}
	}
	bad := Kind(len(kindNames))
	if _, err := json.Marshal(Finding{Kind: bad}); err == nil {
		t.Error("an unknown kind marshals")
	}
	if bad.String() != "kind(10)" {
		t.Errorf("unknown kind spelled %q", bad)
	}
	var k Kind
	if err := k.UnmarshalText([]byte("nonsense")); err == nil {
		t.Error("an unknown kind's text reads")
	}
}

// TestKindOrder: the culprit is taken from every kind but background, each
// once, in the order of the enum.
func TestKindOrder(t *testing.T) {
	for i, k := range kindOrder {
		if k != Kind(i) {
			t.Fatalf("kindOrder[%d] = %s", i, k)
		}
	}
	if len(kindOrder) != int(KindBackground) {
		t.Fatalf("kindOrder has %d kinds, want every kind before background", len(kindOrder))
	}
}
