#!/usr/bin/env python3
"""Run the OpenAI Agents SDK (installed by tests/agents/install-deps.sh into target/agents-venv)
as an agent with Stockade's MCP server over stdio, against the stand-in model's Chat Completions
API. The SDK's own defaults are kept, in particular its 5 s `client_session_timeout_seconds`, so a
tool call that waits longer fails in the SDK and the model is told to try again.

Usage: agents_sdk.py --port PORT [--stockade-arg ARG]...
"""

import argparse
import asyncio

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from agents.mcp import MCPServerStdio
from openai import AsyncOpenAI


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--prompt", default="Follow the test script.")
    a = p.parse_args()
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=f"http://127.0.0.1:{a.port}/v1", api_key="stand-in-no-key", max_retries=0)
    model = OpenAIChatCompletionsModel(model="stand-in", openai_client=client)
    async with MCPServerStdio(name="stockade", params={"command": "stockade", "args": ["mcp"]}) as server:
        agent = Agent(name="tester", instructions="Use the tools.", model=model, mcp_servers=[server])
        result = await Runner.run(agent, a.prompt, max_turns=30)
        print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main())
