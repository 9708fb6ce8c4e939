"""Imported by awa.contrib.django at start-up (every app's ``tasks`` module)."""

from dataclasses import dataclass

from django.utils import timezone

import awa
from awa.contrib.django import task

from .models import Order


@dataclass
class SendConfirmation:
    order_id: int


@task(SendConfirmation, queue="email")
def send_confirmation(job: awa.Job[SendConfirmation]) -> None:
    # A real shop would send an email here; the ORM works as in a view.
    Order.objects.filter(pk=job.args.order_id).update(confirmation_sent_at=timezone.now())
