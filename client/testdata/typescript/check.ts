// What a TypeScript client of Hearth writes, compiled against the types
// openapi-typescript generates from ports/http/openapi.json (hearth.d.ts,
// written beside a copy of this file by client/generate_test.go). A
// document change that breaks such a client fails that test.
import type { components, operations, paths } from "./hearth";

type Schemas = components["schemas"];

export const newOrder: Schemas["OrderCreate"] = {
  customer_id: "0b9f8a2e-7c43-4f6e-9a51-3d2f8c1b6e70",
  amount_cents: 12000,
  scheduled_start_at: "2030-06-01T10:00:00+02:00",
};

export const confirm: Schemas["OrderStatusInput"] = { status: "confirmed", expected_version: 1 };

// Nullable fields are T | null; joined names may be absent.
export function describe(o: Schemas["Order"]): string {
  const start: string | null = o.scheduled_start_at;
  const staff: string = o.staff_name ?? "unassigned";
  return `${o.id} v${o.version} ${o.status} ${start ?? "unscheduled"} ${staff}`;
}

// A write answers the resource and the position it reached: a number, as
// the events' position is.
export function position(w: Schemas["OrderWritten"], e: Schemas["Event"]): [boolean, number] {
  return [w.position === e.position, w.amount_cents];
}

// A change log entry's rows are objects of any members; before is null for
// the first.
export function statusBefore(c: Schemas["Change"]): unknown {
  return c.before === null ? undefined : c.before["status"];
}
export const row: Schemas["Change"]["after"] = { status: "confirmed", version: 2 };

// Answers by route, method and status.
type OrderAnswer = paths["/v1/orders/{id}"]["get"]["responses"][200]["content"]["application/json"];
export const version = (o: OrderAnswer): number => o.version;

// Query parameters: the status filter repeats.
export const query: NonNullable<operations["listOrders"]["parameters"]["query"]> = {
  status: ["pending", "confirmed"],
  page_size: 50,
};

// Clients branch on a problem's type, which names every kind the server
// answers.
export function retryable(p: Schemas["Problem"]): boolean {
  switch (p.type) {
    case "/problems/rate-limited":
    case "/problems/idempotency-in-progress":
    case "/problems/timeout":
      return true;
    case "/problems/precondition-failed":
    case "/problems/conflict":
      return false;
    default:
      return p.status >= 500;
  }
}

export const fields = (p: Schemas["Problem"]): string[] => (p.errors ?? []).map((e) => e.field);
