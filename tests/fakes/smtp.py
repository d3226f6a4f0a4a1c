"""A minimal SMTP server on 127.0.0.1 that keeps what it receives (for mailer tests).

It speaks enough SMTP (RFC 5321) for smtplib, over plain TCP, implicit TLS
(`tls=` given, `implicit=True`) or STARTTLS (`tls=` given, offered in EHLO). It
can refuse mail with a temporary failure, as a real server under load does.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message


@dataclass
class SmtpSink:
    """EHLO, STARTTLS, AUTH PLAIN, MAIL, RCPT, DATA, QUIT; accepted messages are kept."""

    messages: list[Message] = field(default_factory=list)
    recipients: list[list[str]] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)
    server: asyncio.Server | None = None
    # A server certificate: with `implicit`, TLS from the first byte (smtps); else STARTTLS.
    tls: ssl.SSLContext | None = None
    implicit: bool = False
    # Answer this many DATA transfers with 451 (temporary failure) before accepting.
    refuse_data: int = 0
    # While set and not yet released, a DATA transfer is held unanswered (a mail server that hangs).
    hold_data: asyncio.Event | None = None
    held: int = 0
    refused: int = 0
    # Whether each accepted message arrived over TLS.
    encrypted: list[bool] = field(default_factory=list)

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def start(self) -> SmtpSink:
        context = self.tls if self.implicit else None
        self.server = await asyncio.start_server(self._session, "127.0.0.1", 0, ssl=context)
        return self

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        secure = self.implicit

        async def reply(line: str) -> None:
            writer.write(line.encode() + b"\r\n")
            await writer.drain()

        await reply("220 sink ESMTP")
        rcpts: list[str] = []
        try:
            while line := await reader.readline():
                command = line.decode().strip()
                verb = command.split(" ", 1)[0].upper()
                if verb == "EHLO":
                    await reply("250-sink")
                    if self.tls is not None and not secure:
                        await reply("250-STARTTLS")
                    await reply("250 AUTH PLAIN")
                elif verb == "HELO":
                    await reply("250 sink")
                elif verb == "STARTTLS" and self.tls is not None and not secure:
                    await reply("220 ready to start TLS")
                    await writer.start_tls(self.tls)
                    secure = True
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
                    if self.hold_data is not None:
                        self.held += 1
                        await self.hold_data.wait()
                    if self.refused < self.refuse_data:
                        self.refused += 1
                        await reply("451 4.3.0 try again later")
                        continue
                    self.messages.append(message_from_bytes(data))
                    self.recipients.append(rcpts)
                    self.encrypted.append(secure)
                    await reply("250 queued")
                elif verb == "QUIT":
                    await reply("221 bye")
                    break
                else:
                    await reply("250 ok")
        except (ConnectionResetError, ssl.SSLError):
            pass  # a client that gave up (an untrusted certificate, a timeout)
        writer.close()
