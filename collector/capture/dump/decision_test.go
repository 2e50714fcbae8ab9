package dump

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/xpu-timer/xpu-timer/timer"
)

// fill sets every member of v, recursively, to a value that is not zero and
// differs from its neighbours', so that a member dropped or swapped by a
// conversion shows in the JSON.
func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), n)
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(v.Index(i), n)
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, n)
		fill(e, n)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Array:
		for i := range v.Len() {
			fill(v.Index(i), n)
		}
	case reflect.String:
		v.SetString("s" + string(rune('a'+*n%26)))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n))
	default:
		panic("fill: " + v.Kind().String())
	}
}

// TestDecisionCarriesAll: the dump file's decision serialises byte for byte
// as the engine's, with every member set, and with none.
func TestDecisionCarriesAll(t *testing.T) {
	var full timer.Hang
	n := 0
	fill(reflect.ValueOf(&full).Elem(), &n)
	for _, h := range []*timer.Hang{&full, {}, {Kind: timer.HangHost, Rank: -1}} {
		want, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(Decision(h))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("decision as dumped:\n%s\nas the engine writes it:\n%s", got, want)
		}
	}
	if Decision(nil) != nil || Comms(nil) != nil {
		t.Error("nil not kept nil")
	}
	want, _ := json.Marshal(full.Comms)
	if got, _ := json.Marshal(Comms(full.Comms)); !bytes.Equal(got, want) {
		t.Errorf("comms as dumped %s, as the engine writes them %s", got, want)
	}
}
