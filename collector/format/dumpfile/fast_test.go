package dumpfile

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/xpu-timer/xpu-timer/collector/format/stack"
)

func TestFastPathTaken(t *testing.T) {
	if !fields().ok {
		t.Fatal("stack.Thread or stack.Frame has a field of a kind fast.go cannot decode")
	}
	f := sample()
	f.Schema = Schema
	f.Threads = append(f.Threads, stack.Thread{TID: 7, Name: "naïve \"quoted\"\n\u2028", Error: "x\\y",
		Native: []stack.Frame{{Func: "operator<<", Addr: 0xffffffff81000000, Line: -1}}, Python: []stack.Frame{{Func: "f", File: "x.py", Line: 3, Entry: true}}})
	data, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	got, err := fastParse(data)
	if err != nil {
		t.Fatalf("fast path refused a file Write makes: %v", err)
	}
	if !reflect.DeepEqual(got, f) {
		t.Errorf("fast path:\n got %+v\nwant %+v", got, f)
	}
}

// FuzzFastParse checks that whenever the fast path accepts input, it
// decodes exactly what encoding/json decodes.
func FuzzFastParse(f *testing.F) {
	good, _ := json.Marshal(sample())
	f.Add(good)
	f.Add([]byte(`{"threads":[{"tid":1,"native":[{"func":"a\u00e9\ud83d\ude00","addr":18446744073709551615,"line":-3}]}],"rank":1,"rank":2}`))
	f.Add([]byte(`{"threads":[{"TID":1}]}`))
	f.Add([]byte(`{"Threads":[],"threads":[]}`))
	f.Add([]byte(`{"threads":[{"tid":1,"extra":{"a":[1,2,{"b":null}]},"native":[]}]}`))
	f.Add([]byte(`{"threads":[{"tid":1.5}]}`))
	f.Add([]byte(`{"threads":[{"gil":true,"name":"\/x\t"}]} `))
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, err := fastParse(data)
		if err != nil {
			return
		}
		var slow File
		if err := json.Unmarshal(data, &slow); err != nil {
			t.Fatalf("fast path accepted what encoding/json rejects (%v): %q", err, data)
		}
		if !reflect.DeepEqual(fast, &slow) {
			t.Fatalf("decoders disagree on %q:\nfast %+v\nslow %+v", data, fast, &slow)
		}
	})
}
