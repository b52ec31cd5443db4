package client

import (
	"strings"
	"testing"

	"github.com/weirhq/weir/stream"
)

func TestDecodeNDJSON(t *testing.T) {
	in := `{"offset":0,"next_offset":"0000000000000000_0000000000000001","kind":"data","writer":"step/1","attempt":1,"seq":0,"data":"aGk="}
{"offset":1,"next_offset":"0000000000000000_0000000000000002","kind":"data","writer":"","attempt":0,"seq":0,"data":"/w==","encoding":"base64"}
{"offset":2,"next_offset":"0000000000000000_0000000000000003","kind":"abort","writer":"step/1","attempt":2,"from":1}
{"offset":3,"next_offset":"0000000000000000_0000000000000004","kind":"commit","writer":"step/1","attempt":2,"count":4}

{"offset":4,"next_offset":"0000000000000000_0000000000000005","kind":"close"}
`
	recs, err := decodeNDJSON(strings.NewReader(in), encodingBase64)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 5 || string(recs[0].Data) != "hi" || recs[1].Data[0] != 0xff ||
		recs[2].Kind != stream.KindAbort || recs[2].Seq != 1 || recs[3].Seq != 4 || recs[4].Kind != stream.KindClose ||
		recs[4].NextOffset != FormatOffset(5) || recs[0].Writer != "step/1" || recs[2].Attempt != 2 {
		t.Fatalf("%+v", recs)
	}
	text, err := decodeNDJSON(strings.NewReader(`{"offset":0,"kind":"data","seq":0,"data":"h\u00e9"}`), encodingText)
	if err != nil || string(text[0].Data) != "hé" {
		t.Fatalf("text: %+v %v", text, err)
	}
	js, err := decodeNDJSON(strings.NewReader(`{"offset":0,"kind":"data","seq":0,"data":{"a": [1]}}`), encodingJSON)
	if err != nil || string(js[0].Data) != `{"a": [1]}` {
		t.Fatalf("json: %q %v", js[0].Data, err)
	}
	for _, bad := range []string{
		`{"offset":0,"kind":"nope"}`,
		`{"offset":"x","kind":"data"}`,
		`{"offset":0,"kind":"data","data":"!!"}`,
		`{"offset":0,"kind":"data","data":12}`,
		`not json`,
	} {
		if _, err := decodeNDJSON(strings.NewReader(bad), encodingBase64); err == nil {
			t.Errorf("decoded %s", bad)
		}
	}
}
