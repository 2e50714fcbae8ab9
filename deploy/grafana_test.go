package deploy

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// The dashboard imports through Grafana's UI (it declares its data source
// input and what it requires) and filters by job, node and rank.
func TestGrafanaImportAndFilters(t *testing.T) {
	data, err := os.ReadFile("grafana/xpu-timer.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Inputs []struct {
			Name, Type, PluginID string
		} `json:"__inputs"`
		Requires   []struct{ Type, ID string } `json:"__requires"`
		Templating struct {
			List []struct{ Name string }
		}
		Panels []struct {
			Title   string
			Type    string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Inputs) != 1 || d.Inputs[0].Name != "DS_PROMETHEUS" || d.Inputs[0].PluginID != "prometheus" {
		t.Errorf("__inputs %+v", d.Inputs)
	}
	if !strings.Contains(string(data), `"${DS_PROMETHEUS}"`) {
		t.Error("the data source input is not used")
	}
	required := map[string]bool{}
	for _, r := range d.Requires {
		required[r.Type+"/"+r.ID] = true
	}
	for _, want := range []string{"grafana/grafana", "datasource/prometheus"} {
		if !required[want] {
			t.Errorf("__requires lacks %s", want)
		}
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	for _, want := range []string{"datasource", "job_name", "node", "rank"} {
		if !vars[want] {
			t.Errorf("no variable %s", want)
		}
	}
	for _, p := range d.Panels {
		if !required["panel/"+p.Type] {
			t.Errorf("panel %q: type %s not in __requires", p.Title, p.Type)
		}
		for _, tg := range p.Targets {
			if !strings.Contains(tg.Expr, `pod_name=~"$node"`) {
				t.Errorf("panel %q ignores the node filter: %s", p.Title, tg.Expr)
			}
		}
	}
}
