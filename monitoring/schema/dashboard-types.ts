// The type check.sh checks monitoring/grafana-dashboard.json against, built from Grafana's own
// types in @grafana/schema. check.sh compiles this file once per Grafana version, with
// "@grafana/schema" mapped (tsconfig paths) to that version's package.
//
// Grafana's Dashboard type alone leaves a panel's options, its field config's `custom` and its
// targets open (Record<string, unknown>), so a misspelt key there would pass. Here each panel
// type of the dashboard takes the option and field-config types of its plugin from the same
// package, and every target the Prometheus query type.
import type {
  Dashboard,
  FieldConfig,
  FieldConfigSource,
  Panel,
  RowPanel,
  VariableModel,
} from "@grafana/schema";
import type * as stat from "@grafana/schema/dist/esm/raw/composable/stat/panelcfg/x/StatPanelCfg_types.gen";
import type * as timeseries from "@grafana/schema/dist/esm/raw/composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen";
// The Prometheus query type is in @grafana/schema 10.4.19, not in 11.6.16 or 12.4.11, so every
// version checks targets against this one; its base, DataQuery, is the checked version's.
import type { PrometheusDataQuery } from "grafana-schema-10/dist/esm/raw/composable/prometheus/dataquery/x/PrometheusDataQuery_types.gen";

// JSON has no enums: a string enum of the schema (e.g. ThresholdsMode) accepts its values
// ("absolute"). Everything else is kept, so every object stays closed to unknown keys.
export type FromJson<T> = T extends string
  ? `${T}`
  : T extends readonly (infer U)[]
    ? FromJson<U>[]
    : T extends object
      ? { [K in keyof T]: FromJson<T[K]> }
      : T;

// A panel of plugin `Type`. Options are Partial: Grafana fills in the plugin's defaults for
// options left out (stat's wideLayout, for one); nested objects keep their required keys.
type PanelOf<Type extends string, Options, Custom> = Omit<
  Panel,
  "type" | "options" | "fieldConfig" | "targets"
> & {
  type: Type;
  options?: Partial<Options>;
  fieldConfig?: Omit<FieldConfigSource, "defaults"> & {
    defaults: Omit<FieldConfig, "custom"> & { custom?: Custom };
  };
  targets?: PrometheusDataQuery[];
};

// The dashboard's panel types (check_assets.py allows no others). Another plugin needs a line
// of its own here, with the option and field-config types of its panelcfg in the package.
export type TimeseriesPanel = PanelOf<"timeseries", timeseries.Options, timeseries.FieldConfig>;
// The stat panel has no custom field config.
export type StatPanel = PanelOf<"stat", stat.Options, Record<string, never>>;
export type ShmtrainRow = Omit<RowPanel, "panels"> & {
  panels: Array<TimeseriesPanel | StatPanel>;
};

export type ShmtrainDashboard = Omit<Dashboard, "panels" | "templating"> & {
  panels?: Array<TimeseriesPanel | StatPanel | ShmtrainRow>;
  // Grafana writes `definition` (the query as shown in the variable list) into query variables
  // it saves; the schema's VariableModel lacks it.
  templating?: { list?: Array<VariableModel & { definition?: string }> };
};

// The check must be able to fail at every level it claims to check: each canary below has one
// misspelt key or wrong value, which must be an error. Should a type have become `any` (an
// import that no longer resolves), its directive would be unused, which is an error too.
type P = FromJson<TimeseriesPanel>;
type Defaults = FromJson<Omit<FieldConfig, "custom">>;
type Target = FromJson<PrometheusDataQuery>;
type Variable = FromJson<VariableModel>;
// @ts-expect-error a panel's field
export const canaryPanel: P = { type: "timeseries", gridPoss: { x: 0, y: 0, w: 1, h: 1 } };
// @ts-expect-error a field config default
export const canaryUnit: Defaults = { unti: "s" };
// @ts-expect-error a value outside a string enum
export const canaryEnum: Defaults = { thresholds: { mode: "absolut", steps: [] } };
export const canaryCustom: P = {
  type: "timeseries",
  // @ts-expect-error the plugin's custom field config
  fieldConfig: { defaults: { custom: { lineWidht: 1 } }, overrides: [] },
};
export const canaryOptions: P = {
  type: "timeseries",
  // @ts-expect-error the plugin's options
  options: { tooltip: { mode: "multi", sort: "none" }, legnd: {} },
};
// @ts-expect-error a Prometheus target
export const canaryTarget: Target = { refId: "A", expr: "up", exprr: "up" };
// @ts-expect-error a template variable
export const canaryVariable: Variable = { name: "x", type: "query", includeAl: true };
