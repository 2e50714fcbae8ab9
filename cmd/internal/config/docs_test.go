package config

import (
	"os"
	"strings"
	"testing"
)

// Every setting has its row in docs/usage.md's tables, its variable and its
// flag side by side: a setting added to variables without its row fails.
func TestSettingsDocumented(t *testing.T) {
	data, err := os.ReadFile("../../../docs/usage.md")
	if err != nil {
		t.Fatal(err)
	}
	usage := string(data)
	for _, v := range variables {
		row := "| `" + v.env + "` | `--" + v.flag + "` |"
		if !strings.Contains(usage, row) {
			t.Errorf("docs/usage.md has no row starting %s", row)
		}
	}
}
