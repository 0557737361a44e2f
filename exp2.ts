import { LLM } from "./src/engine/llm.ts";
const llm = LLM.load({ model: process.argv[2]!, engine: { threads: 1 } });
const schema = { type: "object", properties: { name: { type: "string", maxLength: 8 }, age: { type: "integer", minimum: 0, maximum: 99 }, tags: {type:"array", items:{type:"string"}} }, required: ["name", "age", "tags"], additionalProperties: false };
for (const c of [{ kind: "json_schema", schema }, { kind: "json_object" }, {kind:"regex", pattern:"[a-z]{3}-[0-9]{2}"}, {kind:"choice", choices:["yes","no"]}]) {
const t2 = performance.now();
const r = await llm.generate([{ messages: [{role:"user", content:"Give me a person"}], maxTokens: 400, temperature: 0, constraint: c as never }, { messages: [{role:"user", content:"Give me a person"}], maxTokens: 400, temperature: 1, seed: 3, constraint: c as never }]);
const t3 = performance.now();
for (const x of r) console.log(JSON.stringify(x.text).slice(0, 300), x.finish_reason, x.completion_tokens, (t3 - t2).toFixed(0));
}
llm.close();
