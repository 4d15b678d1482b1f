package chat_test

import (
	"fmt"

	"agrl.dev/agrl"
	"agrl.dev/agrl/chat"
)

var calc = []agrl.Tool{{Name: "calc", Args: "expr: integers, + - * / and parentheses", Doc: "the exact value"}}

// A sampler's view of one episode with Qwen3: the prompt, a sampled turn read as an action,
// and the text appended when the tool answers.
func Example() {
	f := chat.Qwen3()
	prompt, err := f.Render([]chat.Message{{Role: chat.RoleUser, Content: "What is 12*(3+4)?"}}, calc, true)
	if err != nil {
		panic(err)
	}
	fmt.Print(prompt)
	fmt.Println("|")

	sampled := "<think>\nParentheses first.\n</think>\n\n" +
		"<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expr\": \"12*(3+4)\"}}\n</tool_call><|im_end|>"
	fmt.Println(f.ParseTurn(sampled, calc))
	fmt.Printf("%q\n", f.AppendObservation("84"))
	fmt.Println(f.ParseTurn("<think>\nIt said 84.\n</think>\n\n84<|im_end|>", calc))
	// Output:
	// <|im_start|>system
	// # Tools
	//
	// You may call one or more functions to assist with the user query.
	//
	// You are provided with function signatures within <tools></tools> XML tags:
	// <tools>
	// {"type": "function", "function": {"name": "calc", "description": "the exact value", "parameters": {"type": "object", "properties": {"expr": {"type": "string", "description": "integers, + - * / and parentheses"}}, "required": ["expr"]}}}
	// </tools>
	//
	// For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
	// <tool_call>
	// {"name": <function-name>, "arguments": <args-json-object>}
	// </tool_call><|im_end|>
	// <|im_start|>user
	// What is 12*(3+4)?<|im_end|>
	// <|im_start|>assistant
	// |
	// <think>Parentheses first.</think><tool>calc(12*(3+4))</tool>
	// "\n<|im_start|>user\n<tool_response>\n84\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
	// <think>It said 84.</think><answer>84</answer>
}

// Turns that break the format come back as invalid actions with the reason.
func ExampleLlamaFormat_ParseTurn() {
	f := chat.Llama3()
	for _, turn := range []string{
		`{"name": "calc", "parameters": {"expr": "7*6"}}<|eot_id|>`,
		`{"name": "calc", "parameters": {"expr": 42}}<|eot_id|>`,
		`{"name": "search", "parameters": {"query": "x"}}<|eot_id|>`,
		"The answer is 42.<|eot_id|>",
	} {
		fmt.Println(f.ParseTurn(turn, calc))
	}
	// Output:
	// <tool>calc(7*6)</tool>
	// invalid: argument "expr" of calc is a JSON number, not a string
	// invalid: unknown tool "search" (tools: calc)
	// <answer>The answer is 42.</answer>
}

// A demonstration for SFT: an expert's episode as the model's own text.
func ExampleConversation() {
	turns := []agrl.Turn{
		{Action: agrl.Action{Kind: agrl.ToolCall, Tool: "calc", Args: "12*(3+4)"}, Observation: "84"},
		{Action: agrl.Action{Kind: agrl.AnswerAction, Answer: "84"}},
	}
	msgs, err := chat.Conversation("Answer with the number only.", "What is 12*(3+4)?", turns, calc)
	if err != nil {
		panic(err)
	}
	text, err := chat.Llama3().ToolsInSystem(true).Render(msgs, calc, false)
	if err != nil {
		panic(err)
	}
	fmt.Println(text)
	// Output:
	// <|begin_of_text|><|start_header_id|>system<|end_header_id|>
	//
	// Environment: ipython
	// Cutting Knowledge Date: December 2023
	// Today Date: 26 Jul 2024
	//
	// You have access to the following functions. To call a function, please respond with JSON for a function call.Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.Do not use variables.
	//
	// {
	//     "type": "function",
	//     "function": {
	//         "name": "calc",
	//         "description": "the exact value",
	//         "parameters": {
	//             "type": "object",
	//             "properties": {
	//                 "expr": {
	//                     "type": "string",
	//                     "description": "integers, + - * / and parentheses"
	//                 }
	//             },
	//             "required": [
	//                 "expr"
	//             ]
	//         }
	//     }
	// }
	//
	// Answer with the number only.<|eot_id|><|start_header_id|>user<|end_header_id|>
	//
	// What is 12*(3+4)?<|eot_id|><|start_header_id|>assistant<|end_header_id|>
	//
	// {"name": "calc", "parameters": {"expr": "12*(3+4)"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>
	//
	// "84"<|eot_id|><|start_header_id|>assistant<|end_header_id|>
	//
	// 84<|eot_id|>
}

// Each agrl tool becomes a function with one required string parameter.
func ExampleParam() {
	for _, t := range []agrl.Tool{calc[0], {Name: "echo", Args: "the text to repeat"}} {
		name, desc := chat.Param(t)
		fmt.Printf("%s: %q %q\n", t.Name, name, desc)
	}
	fmt.Println(chat.ToolSchema(calc[0]))
	// Output:
	// calc: "expr" "integers, + - * / and parentheses"
	// echo: "input" "the text to repeat"
	// {"type": "function", "function": {"name": "calc", "description": "the exact value", "parameters": {"type": "object", "properties": {"expr": {"type": "string", "description": "integers, + - * / and parentheses"}}, "required": ["expr"]}}}
}
