package e2e

import (
	"strings"

	"github.com/teamster-fleet/teamster/bus"
)

// Bodies and helpers for building them.

func repeat(s string, n int) string { return strings.Repeat(s, n) }

// padTo pads a JSON object body (ending in "}") with an unknown string field
// so that the whole body is exactly n bytes.
func padTo(obj string, n int) []byte {
	head := strings.TrimSuffix(obj, "}")
	sep := ","
	if strings.HasSuffix(head, "{") {
		sep = ""
	}
	head += sep + `"pad":"`
	fill := n - len(head) - len(`"}`)
	if fill < 0 {
		panic("padTo: body already longer than n")
	}
	return []byte(head + repeat("x", fill) + `"}`)
}

// unicodeText is unicode-heavy text: astral characters, combining marks,
// right-to-left and zero-width characters, a BOM-like character, emoji ZWJ
// sequences.
const unicodeText = "𝕳𝖔𝖘𝖙𝖎𝖑𝖊 ℌ𝔢𝔩𝔩𝔬 Z̸̢̛̙̳̈́a̷̰͐l̶̡̈g̵̣̈́o̴͈̊ \u202etxet desrever\u202c zero\u200bwidth\ufeff 👩\u200d👩\u200d👧 日本語 العربية עברית"

// genericBodies are hostile bodies that no subject may accept: malformed,
// nested past any sane depth, the wrong shape, a missing or wrong version,
// or too large. Each is sent to every subject.
func genericBodies() []struct {
	name string
	body []byte
	want outcome
} {
	nestedArrays := repeat("[", 100_000) + repeat("]", 100_000)
	nestedObjects := `{"v":1,"x":` + repeat(`{"a":`, 100_000) + "1" + repeat("}", 100_000) + "}"
	zeros := strings.TrimSuffix(repeat("0,", 200_000), ",")
	return []struct {
		name string
		body []byte
		want outcome
	}{
		{"empty body", nil, invalid},
		{"null", []byte("null"), invalid},
		{"an array", []byte(`[1,2,3]`), invalid},
		{"a string", []byte(`"teamster"`), invalid},
		{"a number", []byte(`42`), invalid},
		{"true", []byte(`true`), invalid},
		{"truncated in a string", []byte(`{"v":1,"sessionKey":"s`), invalid},
		{"truncated after a colon", []byte(`{"v":`), invalid},
		{"100,000 nested arrays", []byte(nestedArrays), invalid},
		{"100,000 unclosed arrays", []byte(repeat("[", 100_000)), invalid},
		{"100,000 nested objects in an unknown field", []byte(nestedObjects), invalid},
		{"v missing", []byte(`{}`), invalid},
		{"v 2", []byte(`{"v":2}`), invalid},
		{"v 0", []byte(`{"v":0}`), invalid},
		{"v -1", []byte(`{"v":-1}`), invalid},
		{"v as a string", []byte(`{"v":"1"}`), invalid},
		{"v as a fraction", []byte(`{"v":1.5}`), invalid},
		{"v 1e400", []byte(`{"v":1e400}`), invalid},
		{"v with 100,000 digits", []byte(`{"v":` + repeat("9", 100_000) + `}`), invalid},
		{"v null", []byte(`{"v":null}`), invalid},
		{"v true", []byte(`{"v":true}`), invalid},
		{"v an array", []byte(`{"v":[1]}`), invalid},
		{"trailing garbage", []byte(`{"v":1} trailing`), invalid},
		{"two objects", []byte(`{"v":1}{"v":1}`), invalid},
		{"UTF-8 BOM", []byte("\xef\xbb\xbf{\"v\":1}"), invalid},
		{"invalid UTF-8", []byte("\xff\xfe\xfd\xfc"), invalid},
		{"NUL bytes", []byte("\x00\x00\x00"), invalid},
		{"NaN", []byte(`{"v":NaN}`), invalid},
		{"single quotes", []byte(`{'v':1}`), invalid},
		{"a comment", []byte(`{"v":1 /* hi */}`), invalid},
		{"unicode-heavy keys and values, v missing", []byte(`{"` + unicodeText + `":"` + unicodeText + `","text":"` + unicodeText + `"}`), invalid},
		{"200,000-element array, v missing", []byte(`{"x":[` + zeros + `]}`), invalid},
		{"just under 1 MiB, v missing", padTo(`{}`, bus.MaxBody), invalid},
		{"just over 1 MiB", padTo(`{"v":1}`, bus.MaxBody+1), tooLarge},
		{"2 MiB", padTo(`{"v":1}`, 2*bus.MaxBody), tooLarge},
	}
}
