"""A minimal SMTP server on 127.0.0.1 that keeps what it receives (for mailer tests)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message


@dataclass
class SmtpSink:
    """Speaks enough SMTP (RFC 5321) for smtplib: EHLO, AUTH PLAIN, MAIL, RCPT, DATA, QUIT."""

    messages: list[Message] = field(default_factory=list)
    recipients: list[list[str]] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)
    server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def start(self) -> SmtpSink:
        self.server = await asyncio.start_server(self._session, "127.0.0.1", 0)
        return self

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async def reply(line: str) -> None:
            writer.write(line.encode() + b"\r\n")
            await writer.drain()

        await reply("220 sink ESMTP")
        rcpts: list[str] = []
        while line := await reader.readline():
            command = line.decode().strip()
            verb = command.split(" ", 1)[0].upper()
            if verb == "EHLO":
                await reply("250-sink")
                await reply("250 AUTH PLAIN")
            elif verb == "HELO":
                await reply("250 sink")
            elif verb == "AUTH":
                self.logins.append(command)
                await reply("235 ok")
            elif verb == "MAIL":
                rcpts = []
                await reply("250 ok")
            elif verb == "RCPT":
                rcpts.append(command.split(":", 1)[1].strip(" <>"))
                await reply("250 ok")
            elif verb == "DATA":
                await reply("354 go ahead")
                data = b""
                while (chunk := await reader.readline()) != b".\r\n":
                    data += chunk
                self.messages.append(message_from_bytes(data))
                self.recipients.append(rcpts)
                await reply("250 queued")
            elif verb == "QUIT":
                await reply("221 bye")
                break
            else:
                await reply("250 ok")
        writer.close()
